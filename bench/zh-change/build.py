#!/usr/bin/env python3
"""Builds conversations.jsonl and questions.jsonl (the LoCoMo layout `mnemo bench locomo` reads)
from data1.py … data5.py. Run from this folder: python3 build.py"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from build_set import build  # noqa: E402
from data1 import U1  # noqa: E402
from data2 import U2  # noqa: E402
from data3 import U3  # noqa: E402
from data4 import U4  # noqa: E402
from data5 import U5  # noqa: E402

questions = build("zh-change", (U1, U2, U3, U4, U5), "助手")
# Evidence here is always what the user said (odd turns): the assistant's replies only echo.
assert all(int(e.rsplit(":", 1)[1]) % 2 == 1 for q in questions for e in q["evidence_turn_ids"])
