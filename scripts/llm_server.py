"""Serves a GGUF model over llama.cpp's OpenAI-compatible HTTP API (in-process, via xllamacpp),
on 127.0.0.1 only. Used by scripts/setup-llm for mnemo's opt-in real-model tests and benchmarks.

usage: llm_server.py MODEL.gguf PORT [THREADS]
"""
import sys
import time

import xllamacpp

model, port = sys.argv[1], int(sys.argv[2])
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
p = xllamacpp.CommonParams()
p.model.path = model
p.n_ctx = 8192
p.n_parallel = 1
p.cpuparams.n_threads = threads
p.cpuparams_batch.n_threads = threads
p.hostnames = ["127.0.0.1"]
p.port = port
server = xllamacpp.Server(p)
print("listening", server.listening_address, flush=True)
while True:
    time.sleep(3600)
