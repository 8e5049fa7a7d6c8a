"""Runs last (by name): the suite's answers were checked against docs/openapi.json's answer
schemas (conftest's `answers_match_the_document`), for most of the API."""

import conftest


def test_the_suite_checked_most_answers_against_the_document():
    assert len(conftest.ANSWERS_CHECKED) >= 15, sorted(conftest.ANSWERS_CHECKED)
