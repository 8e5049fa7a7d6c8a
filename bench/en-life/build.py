#!/usr/bin/env python3
"""Builds conversations.jsonl and questions.jsonl (the LoCoMo layout `mnemo bench locomo` reads)
from data1.py … data5.py. Run from this folder: python3 build.py"""
import json
from data1 import U1
from data2 import U2
from data3 import U3
from data4 import U4
from data5 import U5

convs, questions = [], []
for user_id, name, conversations in (U1, U2, U3, U4, U5):
    for conv_id, sessions, qs in conversations:
        out_sessions = []
        for s, (time, turns) in enumerate(sessions, 1):
            msgs = []
            for i, text in enumerate(turns, 1):
                user = i % 2 == 1
                msgs.append({"role": "user" if user else "assistant", "speaker": name if user else "Assistant",
                             "content": text, "turn_id": f"{conv_id}:D{s}:{i}"})
            out_sessions.append({"session_id": f"session_{s}", "time": time, "messages": msgs})
        turn_ids = {m["turn_id"] for s in out_sessions for m in s["messages"]}
        convs.append({"dataset": "en-life", "conversation_id": conv_id, "user_id": user_id, "sessions": out_sessions})
        for k, (q, a, evidence, category, as_of, *not_shown) in enumerate(qs):
            ev = [f"{conv_id}:{e}" for e in evidence]
            assert all(e in turn_ids for e in ev), (conv_id, q, ev)
            assert all(e.rsplit(":", 1)[1].isdigit() and int(e.rsplit(":", 1)[1]) % 2 == 1 for e in ev), (q, "evidence is what the user said")
            item = {"dataset": "en-life", "conversation_id": conv_id, "question_id": f"{conv_id}:q{k}",
                    "question": q, "answer": a, "category": category, "evidence_turn_ids": ev}
            if as_of:
                item["as_of"] = as_of
            if not_shown:
                item["not_shown"] = not_shown[0]
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
