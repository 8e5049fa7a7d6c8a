"""Writes a memory set's conversations.jsonl and questions.jsonl (the LoCoMo layout `mnemo bench
locomo` reads) from its users' data, checking that every evidence id names a turn. Used by each
set's build.py (zh-life, en-life)."""
import json


def build(dataset, users, assistant):
    """`users`: (user_id, name, [(conversation_id, [(time, [turns…])…], [question…])…]) each, the
    turns alternating user and assistant from the user; a question is (question, answer, evidence,
    category) with, optionally, `as_of` (a time or None) and `not_shown` (words no context as of
    then may show)."""
    convs, questions = [], []
    for user_id, name, conversations in users:
        for conv_id, sessions, qs in conversations:
            out_sessions = []
            for s, (time, turns) in enumerate(sessions, 1):
                msgs = []
                for i, text in enumerate(turns, 1):
                    user = i % 2 == 1
                    msgs.append({"role": "user" if user else "assistant", "speaker": name if user else assistant,
                                 "content": text, "turn_id": f"{conv_id}:D{s}:{i}"})
                out_sessions.append({"session_id": f"session_{s}", "time": time, "messages": msgs})
            turn_ids = {m["turn_id"] for s in out_sessions for m in s["messages"]}
            convs.append({"dataset": dataset, "conversation_id": conv_id, "user_id": user_id, "sessions": out_sessions})
            for k, (q, a, evidence, category, *when) in enumerate(qs):
                ev = [f"{conv_id}:{e}" for e in evidence]
                assert all(e in turn_ids for e in ev), (conv_id, q, ev)
                item = {"dataset": dataset, "conversation_id": conv_id, "question_id": f"{conv_id}:q{k}",
                        "question": q, "answer": a, "category": category, "evidence_turn_ids": ev}
                if when and when[0]:
                    item["as_of"] = when[0]
                if len(when) > 1:
                    item["not_shown"] = when[1]
                questions.append(item)
    with open("conversations.jsonl", "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    with open("questions.jsonl", "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    turns = sum(len(s["messages"]) for c in convs for s in c["sessions"])
    cats = {}
    for q in questions:
        cats[q["category"]] = cats.get(q["category"], 0) + 1
    print(f"{len(convs)} conversations, {turns} turns, {len(questions)} questions: {cats}")
    return questions
