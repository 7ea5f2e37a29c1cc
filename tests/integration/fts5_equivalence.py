#!/usr/bin/env python3
"""search_stories ranks exactly as SQLite FTS5's bm25() does.

Starts the real `tollgate serve` on a generated corpus (127.0.0.1, a port it picks; it answers
from the index `tollgate index build` wrote for the corpus, mapped at start), builds an
FTS5 table over the same stories (Python's sqlite3: Debian's SQLite with FTS5), and asks both the
same queries: one, two and three terms, a repeated term, a phrase, a phrase with a term, two
phrases; and phrases of the commonest words (searched through pair terms) alone, beside terms,
two at once and of three words. For every query the REST answer's `total` must equal FTS5's match count and its ten
ids must equal, in order, FTS5's
    SELECT id FROM t WHERE t MATCH ? ORDER BY bm25(t, 0.0, 3.0, 1.0), rowid LIMIT 10
(title weighted 3, text 1; rowid = the numeric story id, so ties break by id on both sides).

Usage: fts5_equivalence.py TOLLGATE_BINARY [--count N] [--seed S]
Exit 0: every query equal; 1: a difference (each one printed); 2: the set-up failed.
"""
import argparse
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("tollgate")
ap.add_argument("--count", type=int, default=12000)
ap.add_argument("--seed", type=int, default=7)
args = ap.parse_args()


def tokens(s):
    # the generated corpus' words are ASCII; both tokenizers split on anything not alphanumeric
    return re.findall(r"[a-z0-9]+", s.lower())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


work = tempfile.mkdtemp(prefix="tollgate-fts5-")
corpus = os.path.join(work, "corpus.jsonl")
with open(corpus, "wb") as f:
    subprocess.run([args.tollgate, "corpus", "generate", "--count", str(args.count), "--seed",
                    str(args.seed)], stdout=f, check=True)
stories = [json.loads(line) for line in open(corpus, "rb")]

# FTS5 over the same stories
db = sqlite3.connect(":memory:")
db.execute("CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, title, text, "
           "tokenize='unicode61 remove_diacritics 2')")
db.executemany("INSERT INTO t(rowid, id, title, text) VALUES (?, ?, ?, ?)",
               ((int(s["id"]), s["id"], s["title"], s.get("text", "")) for s in stories))
TOP = "SELECT id FROM t WHERE t MATCH ? ORDER BY bm25(t, 0.0, 3.0, 1.0), rowid LIMIT 10"
COUNT = "SELECT count(*) FROM t WHERE t MATCH ?"

# queries from titles spread over the corpus: (tollgate query, FTS5 MATCH expression)
queries = []
for i, s in enumerate(stories[:: max(1, len(stories) // 60)]):
    w = tokens(s["title"])
    if len(w) < 4:
        continue
    a, b, c, d = w[i % (len(w) - 3):][:4]
    q = lambda *ts: " ".join('"' + t + '"' for t in ts)
    queries += [
        (a, q(a)),
        (f"{a} {b}", q(a, b)),
        (f"{a} {b} {c}", q(a, b, c)),
        (f"{a} {a} {b}", q(a, a, b)),
        (f'"{a} {b}"', f'"{a} {b}"'),
        (f'{c} "{a} {b}"', f'{q(c)} "{a} {b}"'),
        (f'"{a} {b}" "{c} {d}"', f'"{a} {b}" "{c} {d}"'),
    ]
# phrases of the commonest words, which the index also holds as pair terms (docs/design.md §8):
# alone, beside terms, two of them, of three words
common = ["the", "of", "a", "to", "in", "and", "is"]
for i in range(12):
    a, b, c, d = (common[(i * k + i // 3) % len(common)] for k in (1, 3, 5, 2))
    if len({a, b, c}) < 3:
        continue
    queries += [
        (f'"{a} {b}"', f'"{a} {b}"'),
        (f'{c} "{a} {b}"', f'"{c}" "{a} {b}"'),
        (f'{a} "{a} {b}"', f'"{a}" "{a} {b}"'),
        (f'"{a} {b}" "{b} {c}" {d}', f'"{a} {b}" "{b} {c}" "{d}"'),
        (f'"{a} {b} {c}"', f'"{a} {b} {c}"'),
        (f'{d} "{c} {a} {b}"', f'"{d}" "{c} {a} {b}"'),
    ]

port = free_port()
data = os.path.join(work, "data")
config = os.path.join(work, "tollgate.toml")
with open(config, "w") as f:
    # a plan no query of this test can exhaust
    f.write('[quota]\ndemo_plan = "wide"\n[plans.wide]\nrate_per_sec = 1000000.0\n'
            'burst = 1000000\nmonthly_quota = 1000000000\noverage = "bill"\n')
# the server answers from the persisted index, built ahead as a deploy pipeline would
subprocess.run([args.tollgate, "index", "build", "--corpus", corpus], check=True,
               stderr=subprocess.DEVNULL)
server_err = os.path.join(work, "serve.err")
server = subprocess.Popen([args.tollgate, "serve", "--config", config, "--corpus", corpus,
                           "--data-dir", data, "--listen", f"127.0.0.1:{port}", "--threads", "1"],
                          stdout=subprocess.PIPE, stderr=open(server_err, "w"), text=True)
try:
    key = None
    deadline = time.time() + 60
    while key is None and time.time() < deadline:
        line = server.stdout.readline()
        if not line:
            break
        m = re.search(r"demo key:\s*(\S+)", line)
        key = m.group(1) if m else None
    if key is None:
        print("set-up: no demo key printed; stderr:", open(server_err).read(), file=sys.stderr)
        sys.exit(2)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/readyz", timeout=1).read()
            break
        except Exception:
            time.sleep(0.1)
    if "index: mapped" not in open(server_err).read():
        print("set-up: the server did not map the index built for it; stderr:",
              open(server_err).read(), file=sys.stderr)
        sys.exit(2)

    bad = 0
    for ours_q, fts_q in queries:
        url = f"{base}/v1/stories?q={urllib.parse.quote(ours_q)}&limit=10"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
        body = json.loads(urllib.request.urlopen(req, timeout=10).read())
        ours = [s["id"] for s in body["stories"]]
        want = [r[0] for r in db.execute(TOP, (fts_q,))]
        total = db.execute(COUNT, (fts_q,)).fetchone()[0]
        if ours != want or body["total"] != total:
            bad += 1
            print(f"differs: {ours_q!r}: tollgate total {body['total']} {ours}\n"
                  f"             FTS5 total {total} {want}", file=sys.stderr)
    matched = sum(1 for q, f in queries if db.execute(COUNT, (f,)).fetchone()[0] > 0)
    print(f"{len(queries)} queries ({matched} with matches) over {len(stories)} stories: "
          f"{len(queries) - bad} equal to FTS5, {bad} differ")
    if matched < len(queries) // 2:
        print("set-up: too few queries match anything to compare", file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if bad else 0)
finally:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
