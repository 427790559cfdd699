#!/usr/bin/env python3
"""kith side by side with the peers a user would pick instead.

Run by tests/peers/compare.sh, which installs the peers from their package
registries into a temp prefix and passes their binaries here (agentsview;
no cass release builds on stable Rust, see compare.sh). This script:

1. builds one corpus of Claude Code transcripts in a fake HOME
   (~/.claude/projects/<proj>/<session>.jsonl): every LoCoMo dev session as
   one transcript (lines as tests/src/locomo.rs writes them), plus padding
   sessions cut from real fixture lines, up to --sessions in all;
2. lets each tool index it its own way, timing it and reading peak RSS and
   the index's size on disk;
3. asks every LoCoMo question (category 5 left out) through each tool's own
   CLI, interleaved (tool order rotates per query), as written and as
   keyword queries derived the same way for every tool, timing each process
   from spawn to exit, and maps the sessions returned back to LoCoMo
   sessions for hit@1, hit@5 and R@10 by session;
4. writes every figure to --out (JSON) and prints the tables.

Only loopback; every loop is bounded.
"""

import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

NS = uuid.UUID("6b697468-2d70-6565-7273-2d636f6d7061")  # fixed: same corpus every run

# ---------------------------------------------------------------- corpus

MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]


def rfc3339(text):
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00.000Z' (as locomo.rs)."""
    clock, date = text.split(" on ", 1)
    hm, half = clock.strip().split(" ", 1)
    h, m = (int(x) for x in hm.split(":"))
    h = h % 12 + (12 if half.lower() == "pm" else 0)
    parts = [p for p in re.split(r"[ ,]", date) if p]
    day, month, year = int(parts[0]), MONTHS.index(parts[1]) + 1, int(parts[2])
    return f"{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:00.000Z"


def load_locomo(data_dir):
    """Sessions [(conv, number, turns, started_at)] and questions."""
    sessions, questions = [], []
    for path in sorted(glob.glob(os.path.join(data_dir, "conv-*.json"))):
        conv = os.path.basename(path)[:-5]
        doc = json.load(open(path))
        keys = sorted((int(k[8:]), k) for k in doc
                      if k.startswith("session_") and k[8:].isdigit())
        for n, key in keys:
            turns = doc[key] or []
            if turns:
                sessions.append((conv, n, turns, rfc3339(doc[f"{key}_date_time"])))
        for qa in doc.get("qa", []):
            if qa.get("category") == 5:
                continue
            ev = [e.strip() for x in qa.get("evidence", []) for e in x.split(";") if e.strip()]
            if not ev:
                continue
            questions.append({
                "conversation": conv,
                "category": qa.get("category"),
                "text": qa["question"],
                "sessions": sorted({e.split(":")[0] for e in ev}),
            })
    return sessions, questions


def locomo_transcript(conv, n, turns, started_at, sid):
    """One LoCoMo session as a Claude Code transcript, as tests/src/locomo.rs
    writes it (plus cwd and the parent chain a real transcript has)."""
    out, parent = [], None
    for i, turn in enumerate(turns):
        text = turn.get("text") or ""
        if turn.get("blip_caption"):
            text += f" [shares a photo: {turn['blip_caption']}]"
        u = str(uuid.uuid5(NS, f"{conv}-{n}-{i}"))
        out.append(json.dumps({
            "parentUuid": parent,
            "type": "user",
            "uuid": u,
            "sessionId": sid,
            "cwd": f"/home/u/locomo/{conv}",
            "timestamp": started_at,
            "message": {"role": "user", "content": f"{turn.get('speaker', '')}: {text}"},
        }))
        parent = u
    return "\n".join(out) + "\n"


def fixture_pools(fixtures_dir):
    """Real Claude Code user/assistant lines, per fixture file."""
    pools = {}
    for path in sorted(glob.glob(os.path.join(fixtures_dir, "*.jsonl"))):
        lines = []
        for raw in open(path, encoding="utf-8"):
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("type") in ("user", "assistant") \
                    and isinstance(obj.get("message"), dict):
                lines.append(obj)
        if len(lines) >= 5:
            pools[os.path.basename(path)] = lines
    return pools


def padding_transcript(pools, rng, i, sid):
    """A session of 4 to 20 consecutive real fixture lines, re-identified."""
    names = sorted(pools)
    name = rng.choices(names, weights=[len(pools[n]) for n in names])[0]
    pool = pools[name]
    length = min(len(pool), rng.randint(4, 20))
    start = rng.randint(0, len(pool) - length)
    out, parent = [], None
    for j, obj in enumerate(pool[start:start + length]):
        obj = dict(obj)
        u = str(uuid.uuid5(NS, f"pad-{i}-{j}"))
        obj.update({"uuid": u, "parentUuid": parent, "sessionId": sid, "isSidechain": False})
        obj.pop("agentId", None)
        out.append(json.dumps(obj))
        parent = u
    return name.split("__")[0] + "-" + name.split("__")[1], "\n".join(out) + "\n"


def build_corpus(home, data_dir, fixtures_dir, total):
    """Writes the fake HOME; returns (sid -> (conv, 'D<n>') | None, questions, stats)."""
    sessions, questions = load_locomo(data_dir)
    projects = os.path.join(home, ".claude", "projects")
    if os.path.exists(home):
        shutil.rmtree(home)
    os.makedirs(projects)
    owner, nbytes = {}, 0
    for conv, n, turns, started_at in sessions:
        sid = str(uuid.uuid5(NS, f"locomo/{conv}/{n}"))
        d = os.path.join(projects, f"-home-u-locomo-{conv}")
        os.makedirs(d, exist_ok=True)
        text = locomo_transcript(conv, n, turns, started_at, sid)
        with open(os.path.join(d, f"{sid}.jsonl"), "w") as f:
            f.write(text)
        owner[sid] = (conv, f"D{n}")
        nbytes += len(text.encode())
    pools = fixture_pools(fixtures_dir)
    rng = random.Random(28)
    pad = max(0, total - len(sessions))
    for i in range(pad):
        sid = str(uuid.uuid5(NS, f"pad/{i}"))
        proj, text = padding_transcript(pools, rng, i, sid)
        d = os.path.join(projects, f"-home-u-pad-{proj}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{sid}.jsonl"), "w") as f:
            f.write(text)
        owner[sid] = None
        nbytes += len(text.encode())
    stats = {"sessions": len(owner), "locomo_sessions": len(sessions),
             "padding_sessions": pad, "bytes": nbytes, "questions": len(questions),
             "fixture_files": sorted(pools)}
    return owner, questions, stats


# ------------------------------------------------------------- queries

STOP = set("""a about above after again against all am an and any are as at be
because been before being below between both but by can could did do does doing
down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours ourselves out over
own same she should so some such than that the their theirs them themselves then
there these they this those through to too under until up very was we were what
when where which while who whom why will with would you your yours yourself
yourselves s t ever also likely might may much many kind kinds type types""".split())


def keywords(question):
    """The same derivation for every tool: lower case, words only, English
    stop and question words out, possessive 's off, each word once, in order."""
    words, seen = [], set()
    for w in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", question.lower()):
        w = re.sub(r"'s$", "", w)
        if w in STOP or w in seen or len(w) < 2:
            continue
        seen.add(w)
        words.append(w)
    return " ".join(words) if words else question


# ------------------------------------------------------------- processes

def run_timed(argv, env, timeout=120):
    """Spawn to exit: (seconds, returncode, stdout, stderr, peak RSS KiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        killer = threading.Timer(timeout, p.kill)
        killer.daemon = True
        killer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            killer.cancel()
        dt = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (dt, p.returncode, out.read().decode("utf-8", "replace"),
                err.read().decode("utf-8", "replace"), ru.ru_maxrss)


def run_rss(argv, env, timeout=3600, cwd=None):
    """Like run_timed, with the process's own peak RSS (KiB) from wait4."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, cwd=cwd)
    out = []
    deadline = time.monotonic() + timeout
    os.set_blocking(p.stdout.fileno(), False)
    while True:
        chunk = p.stdout.read()
        if chunk:
            out.append(chunk)
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            chunk = p.stdout.read()
            if chunk:
                out.append(chunk)
            break
        if time.monotonic() > deadline:
            p.kill()
            _, status, ru = os.wait4(p.pid, 0)
            break
        time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t0
    return dt, p.returncode, b"".join(out).decode("utf-8", "replace"), ru.ru_maxrss


def proc_status(pid, field):
    """VmHWM / VmRSS (KiB) of a live process, or None."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    i = min(len(xs) - 1, max(0, int(round(q / 100 * len(xs) + 0.5)) - 1))
    return xs[i]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------- kith

class Kith:
    name = "kith"

    def __init__(self, bindir, prefix, home, model_dir):
        self.bin = bindir
        self.data = os.path.join(prefix, "kith-data")
        self.state = os.path.join(prefix, "kith-state")
        self.home = home
        self.model_dir = model_dir
        self.proc = None
        self.url = None
        self.token = None

    def version(self):
        return subprocess.run([os.path.join(self.bin, "kith"), "--version"],
                              capture_output=True, text=True).stdout.strip()

    def env(self):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("KITH_"):
                del e[k]
        e.update({"HOME": self.home, "KITH_CLAUDE_DIR": os.path.join(self.home, ".claude"),
                  "KITH_CONFIG_DIR": os.path.join(self.state, "config"),
                  "KITH_STATE_DIR": os.path.join(self.state, "state"),
                  "KITH_CODEX_DIR": os.path.join(self.home, ".codex"),
                  "KITH_PI_DIR": os.path.join(self.home, ".pi", "agent")})
        if self.url:
            e.update({"KITH_CENTRAL_URL": self.url, "KITH_TOKEN": self.token})
        return e

    def start(self):
        for d in (self.data, self.state):
            if os.path.exists(d):
                shutil.rmtree(d)
        os.makedirs(self.state)
        env = dict(os.environ)
        env.pop("KITH_DATA_DIR", None)
        env.pop("KITH_LISTEN", None)
        env.update({"KITH_MODEL_DIR": self.model_dir, "KITH_LOG": "info"})
        self.log_path = os.path.join(os.path.dirname(self.data), "kith-central.log")
        self.proc = subprocess.Popen(
            [os.path.join(self.bin, "kith-central"), "serve", "--listen", "127.0.0.1:0",
             "--data-dir", self.data],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.log_path, "w"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.url:
            m = re.search(r"listening on (\S+)", open(self.log_path).read())
            if m:
                self.url = m.group(1)
            elif self.proc.poll() is not None:
                raise SystemExit("kith-central exited:\n" + open(self.log_path).read())
            time.sleep(0.1)
        if not self.url:
            raise SystemExit("kith-central did not say where it listens")
        assert self.url.startswith("http://127.0.0.1:"), self.url
        out = subprocess.run(
            [os.path.join(self.bin, "kith-central"), "machine", "register", "--local",
             "--user", "u.local", "--name", "m", "--data-dir", self.data],
            env=env, capture_output=True, text=True, check=True)
        self.token = out.stdout.strip().splitlines()[-1].strip()

    def status(self):
        req = urllib.request.Request(self.url + "/api/status",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def index(self):
        """Backfill, then wait until central has indexed and embedded it all."""
        self.start()
        t0 = time.perf_counter()
        dt, rc, out, rss = run_rss([os.path.join(self.bin, "kith"), "backfill"], self.env())
        if rc != 0:
            raise SystemExit(f"kith backfill failed ({rc}):\n{out[-3000:]}")
        backfill_s = dt
        keyword_ready = None
        deadline = time.monotonic() + 3 * 3600
        last = None
        while time.monotonic() < deadline:
            s = self.status()
            q, c = s["queue"], s["counts"]
            if keyword_ready is None and c["pending_index_jobs"] == 0:
                keyword_ready = time.perf_counter() - t0
            if c["pending_index_jobs"] == 0 and q["ingest_realtime"] == 0 and q["ingest_bulk"] == 0:
                break
            if time.monotonic() - (last or 0) > 30:
                log(f"  kith: pending {c['pending_index_jobs']} runs, "
                    f"{q['ingest_realtime']}+{q['ingest_bulk']} to embed, {c['chunks']} chunks")
                last = time.monotonic()
            time.sleep(0.5)
        else:
            raise SystemExit("kith-central did not finish indexing within 3 h")
        total = time.perf_counter() - t0
        s = self.status()
        return {"index_s": total, "backfill_s": backfill_s, "keyword_ready_s": keyword_ready,
                "backfill_peak_rss_kib": rss, "runs": s["counts"]["runs"],
                "chunks": s["counts"]["chunks"], "embedder": s["embedder"],
                "index_peak_rss_kib": proc_status(self.proc.pid, "VmHWM")}

    def search_argv(self, query, mode):
        return [os.path.join(self.bin, "kith"), "search", query, "--json", "--limit", "10",
                "--mode", mode]

    def sessions(self, out):
        """Groups in order (one per conversation = one session); hits of a
        binary that does not group are mapped to theirs through their run."""
        doc = json.loads(out)
        ranked = []
        for g in doc.get("groups") or []:
            # session_id is the agent's (the transcript's sessionId);
            # conversation_id is kith's own id for the conversation.
            sid = g.get("session_id") or self.run_conversation(
                (g.get("hits") or [{}])[0].get("run_id"))
            if sid and sid not in ranked:
                ranked.append(sid)
        if not doc.get("groups"):
            for h in doc.get("hits") or []:
                sid = self.run_conversation(h.get("run_id"))
                if sid and sid not in ranked:
                    ranked.append(sid)
        return ranked, doc.get("degraded")

    def run_conversation(self, run_id):
        """A run's conversation_id in /api/runs (the transcript's sessionId), cached."""
        cache = self.__dict__.setdefault("_runs", {})
        if run_id and run_id not in cache:
            req = urllib.request.Request(f"{self.url}/api/runs/{run_id}",
                                         headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(req, timeout=30) as r:
                cache[run_id] = json.load(r).get("conversation_id")
        return cache.get(run_id)

    def disk(self):
        return du(self.data)

    def stop(self):
        peak = proc_status(self.proc.pid, "VmHWM") if self.proc else None
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return peak


# ------------------------------------------------------------- agentsview

class AgentsView:
    name = "agentsview"

    def __init__(self, binary, prefix, home):
        self.bin = binary
        self.data = os.path.join(prefix, "agentsview-data")
        self.home = home

    def version(self):
        return subprocess.run([self.bin, "--version"], capture_output=True,
                              text=True, env=self.env()).stdout.strip()

    def env(self):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("AGENTSVIEW_") or k.endswith("_DIR") and k != "TMPDIR":
                e.pop(k, None)
        e.update({"HOME": self.home, "AGENTSVIEW_DATA_DIR": self.data,
                  "CLAUDE_PROJECTS_DIR": os.path.join(self.home, ".claude", "projects"),
                  # Loopback only: no telemetry, no update check.
                  "AGENTSVIEW_TELEMETRY_ENABLED": "false", "DO_NOT_TRACK": "1",
                  "AGENTSVIEW_DISABLE_UPDATE_CHECK": "1"})
        return e

    def daemon_pid(self):
        """The daemon's pid, from the daemon.<pid>.json it writes in its data dir."""
        for path in glob.glob(os.path.join(self.data, "daemon.*.json")):
            pid = os.path.basename(path).split(".")[1]
            if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
                return int(pid)
        return None

    def index(self):
        if os.path.exists(self.data):
            shutil.rmtree(self.data)
        os.makedirs(self.data)
        dt, rc, out, rss = run_rss([self.bin, "sync"], self.env())
        if rc != 0:
            raise SystemExit(f"agentsview sync failed ({rc}):\n{out[-3000:]}")
        self.sync_output = out[-2000:]
        pid = self.daemon_pid()
        self.pid = pid
        return {"index_s": dt, "sync_peak_rss_kib": rss, "daemon_pid_found": pid is not None,
                "index_peak_rss_kib": proc_status(pid, "VmHWM") if pid else None}

    def search_argv(self, query, mode):
        # Every session of the corpus, as the other tools search them all
        # (by default it leaves out one-shot, automated and child sessions).
        argv = [self.bin, "session", "search", query, "--json", "--limit", "100",
                "--include-one-shot", "--include-automated", "--include-children"]
        if mode == "fts":
            argv.append("--fts")
        return argv

    def sessions(self, out):
        doc = json.loads(out)
        items = doc
        if isinstance(doc, dict):
            for k in ("results", "matches", "hits", "items", "data", "sessions"):
                if isinstance(doc.get(k), list):
                    items = doc[k]
                    break
            else:
                items = []
        ranked = []
        for it in items or []:
            sid = it.get("session_id") or it.get("sessionId") or (it.get("session") or {}).get("id")
            if sid:
                sid = sid.split(":")[-1]
                if sid not in ranked:
                    ranked.append(sid)
        return ranked, None

    def disk(self):
        return du(self.data)

    def stop(self):
        peak = proc_status(self.pid, "VmHWM") if self.pid else None
        subprocess.run([self.bin, "daemon", "stop"], env=self.env(), capture_output=True,
                       timeout=60)
        return peak


# ------------------------------------------------------------- scoring

def score(ranked, owner, q):
    want = set(q["sessions"])
    mapped = [owner.get(s) for s in ranked]
    keys = [m[1] if m and m[0] == q["conversation"] else None for m in mapped]
    found = lambda k: {x for x in keys[:k] if x in want}
    return {"hit@1": 1.0 if found(1) else 0.0, "hit@5": 1.0 if found(5) else 0.0,
            "R@10": len(found(10)) / len(want), "returned": min(len(ranked), 10),
            "empty": 1.0 if not ranked else 0.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--questions", type=int, default=0, help="first N only (0: all)")
    ap.add_argument("--kith-bin", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--agentsview", required=True)
    ap.add_argument("--cass-status", default="",
                    help="what became of building cass (compare.sh), for the record")
    ap.add_argument("--locomo", default="/work/shared/data/locomo-dev")
    ap.add_argument("--fixtures", default="/work/shared/fixtures/claude-code")
    ap.add_argument("--command", default="")
    args = ap.parse_args()

    prefix = os.path.abspath(args.prefix)
    home = os.path.join(prefix, "home")
    owner, questions, corpus = build_corpus(home, args.locomo, args.fixtures, args.sessions)
    if args.questions:
        questions = questions[:args.questions]
    log(f"corpus: {corpus['sessions']} sessions ({corpus['locomo_sessions']} LoCoMo), "
        f"{corpus['bytes'] / 1e6:.1f} MB, {len(questions)} questions")

    tools = [Kith(args.kith_bin, prefix, home, args.model_dir), AgentsView(args.agentsview, prefix, home)]
    # (tool, mode) pairs searched; kith's default mode is hybrid.
    modes = {"kith": ["hybrid", "keyword"], "agentsview": ["default", "fts"]}

    result = {"command": args.command, "machine": machine(), "corpus": corpus,
              "cass": args.cass_status,
              "versions": {t.name: t.version() for t in tools}, "index": {}, "search": {},
              "recall": {}, "peak_rss_kib": {}, "disk_bytes": {}}

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    try:
        for t in tools:
            log(f"indexing with {t.name} ...")
            result["index"][t.name] = t.index()
            result["disk_bytes"][t.name] = t.disk()
            log(f"  {t.name}: {result['index'][t.name]}")
            save()

        forms = {"written": [q["text"] for q in questions],
                 "keywords": [keywords(q["text"]) for q in questions]}
        pairs = [(t, m) for t in tools for m in modes[t.name]]
        lat = {f"{t.name}/{m}": [] for t, m in pairs}
        per = {form: {f"{t.name}/{m}": [] for t, m in pairs} for form in forms}
        failures = {f"{t.name}/{m}": 0 for t, m in pairs}
        degraded = {f"{t.name}/{m}": 0 for t, m in pairs}
        cli_rss = {f"{t.name}/{m}": 0 for t, m in pairs}
        result["search_cli_peak_rss_kib"] = cli_rss
        for qi, q in enumerate(questions):
            for form, texts in forms.items():
                # Interleaved: A, B, A, B ..., the order rotating per query.
                k = (qi * len(forms) + list(forms).index(form)) % len(pairs)
                for t, m in pairs[k:] + pairs[:k]:
                    key = f"{t.name}/{m}"
                    dt, rc, out, err, rss = run_timed(t.search_argv(texts[qi], m), t.env())
                    lat[key].append(dt)
                    cli_rss[key] = max(cli_rss[key], rss)
                    ranked, deg = [], None
                    if rc == 0:
                        try:
                            ranked, deg = t.sessions(out)
                        except (ValueError, AttributeError) as e:
                            failures[key] += 1
                            if failures[key] <= 3:
                                log(f"  {key}: unreadable output ({e}): {out[:300]!r}")
                    else:
                        failures[key] += 1
                        if failures[key] <= 3:
                            log(f"  {key}: exit {rc}: {err[-300:]!r}")
                    if deg:
                        degraded[key] += 1
                    s = score(ranked, owner, q)
                    s["category"] = q["category"]
                    per[form][key].append(s)
            if qi % 50 == 49 or qi == len(questions) - 1:
                log(f"  {qi + 1}/{len(questions)} questions")
                summarize(result, lat, per, failures, degraded)
                save()
        for t in tools:
            result["peak_rss_kib"][t.name] = t.stop()
            result["disk_bytes"][t.name] = t.disk()
        summarize(result, lat, per, failures, degraded)
        save()
    finally:
        for t in tools:
            try:
                t.stop()
            except Exception:
                pass
    print_tables(result)


def summarize(result, lat, per, failures, degraded):
    result["search"] = {k: {"n": len(v), "p50_ms": 1000 * pct(v, 50), "p99_ms": 1000 * pct(v, 99),
                            "mean_ms": 1000 * statistics.mean(v), "failures": failures[k],
                            "degraded": degraded[k]}
                        for k, v in lat.items() if v}
    result["recall"] = {
        form: {k: {m: statistics.mean(s[m] for s in v) for m in
                   ("hit@1", "hit@5", "R@10", "returned", "empty")} | {"n": len(v)}
               for k, v in d.items() if v}
        for form, d in per.items()}


def machine():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = int(open("/proc/meminfo").readline().split()[1]) // 1024
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "mem_mib": mem,
            "kernel": os.uname().release}


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b not in (None, 0) else "-"


def peak_rss(r, n):
    """The tool's largest process: its server/daemon, or the indexing CLI."""
    i = r["index"].get(n, {})
    xs = [r["peak_rss_kib"].get(n), i.get("index_peak_rss_kib"),
          i.get("backfill_peak_rss_kib"), i.get("sync_peak_rss_kib")]
    return max([x for x in xs if x] or [0])


def print_tables(r):
    names = list(r["versions"])
    base = names[0]
    print("\n== resources (ratio: tool / kith) ==")
    print(f"{'tool':<12}{'index s':>10}{'':>8}{'peak RSS MiB':>14}{'':>8}{'disk MiB':>10}{'':>8}")
    for n in names:
        i, b = r["index"].get(n, {}), r["index"].get(base, {})
        print(f"{n:<12}{i.get('index_s', 0):>10.1f}{ratio(i.get('index_s'), b.get('index_s')):>8}"
              f"{peak_rss(r, n) / 1024:>14.1f}{ratio(peak_rss(r, n), peak_rss(r, base)):>8}"
              f"{r['disk_bytes'].get(n, 0) / 2**20:>10.1f}"
              f"{ratio(r['disk_bytes'].get(n), r['disk_bytes'].get(base)):>8}")
    print("\n== search latency, process spawn to exit (ratio: / kith/hybrid) ==")
    print(f"{'tool/mode':<22}{'n':>6}{'p50 ms':>9}{'':>8}{'p99 ms':>9}{'':>8}{'fail':>6}")
    s = r["search"]
    k0 = s.get(f"{base}/hybrid", {})
    for k, v in s.items():
        print(f"{k:<22}{v['n']:>6}{v['p50_ms']:>9.0f}{ratio(v['p50_ms'], k0.get('p50_ms')):>8}"
              f"{v['p99_ms']:>9.0f}{ratio(v['p99_ms'], k0.get('p99_ms')):>8}{v['failures']:>6}")
    for form, d in r["recall"].items():
        print(f"\n== session recall, questions {form} (ratio: / kith/hybrid) ==")
        print(f"{'tool/mode':<22}{'hit@1':>7}{'':>7}{'hit@5':>7}{'':>7}{'R@10':>7}{'':>7}{'none':>7}")
        k0 = d.get(f"{base}/hybrid", {})
        for k, v in d.items():
            print(f"{k:<22}" + "".join(f"{v[m]:>7.3f}{ratio(v[m], k0.get(m)):>7}"
                                       for m in ("hit@1", "hit@5", "R@10")) + f"{v['empty']:>7.3f}")


if __name__ == "__main__":
    main()
