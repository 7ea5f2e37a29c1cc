#!/usr/bin/env python3
"""Helpers for perf/gate/run (standard library only).

  gate.py dump FILE                 one callgrind dump: prints "ir=N allocs=M desc=..." where
                                    allocs = calls made to allocation functions in that part,
                                    except under a tick (each counted site goes to stderr)
  gate.py compare BASELINE FIGURES [--accept] [--partial]
                                    prints every figure against the baseline, exits 1 when one
                                    regressed past its tolerance or is missing (--partial: only
                                    some ops were run; the others are neither missing nor
                                    dropped); with --accept rewrites BASELINE's figures from
                                    FIGURES (keeping tolerances and notes)
FIGURES is a JSON object {"figures": {name: value}}.
"""
import json
import re
import sys

# Entry points of the heap allocator, as callgrind names them (glibc, libstdc++, mimalloc).
ALLOC_RE = re.compile(
    r"^(malloc|calloc|realloc|aligned_alloc|posix_memalign|memalign|valloc|"
    r"operator new(\[\])?\(.*\)|mi_(malloc|calloc|realloc|zalloc|new)\w*)$")


# A caller chain (from --separate-callersN) through these is time-driven work (the ~100 ms
# tick: reload checks, reconcile, persist), not the request path.
TICK_RE = re.compile(r"'(tollgate::net::core::tick\(\)|[^']*::on_tick\()")


def read_dump(path, detail=None):
    """Returns (total Ir, allocation calls off the tick, description) of one callgrind output
    file. With --separate-callersN on the allocation functions, a function name carries its
    callers after "'"; allocations under a tick are not counted. `detail`, a list, receives
    (count, chain) of every counted allocation site."""
    names = {}
    total = None
    allocs = 0
    desc = ""
    current_cfn = None
    name_re = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                m = name_re.match(line.rstrip("\n"))
                if m:
                    ident, name = m.group(1), m.group(2)
                    if name is not None:
                        names[ident] = name
                    name = names.get(ident, "")
                else:  # uncompressed names
                    name = line.split("=", 1)[1].rstrip("\n")
                current_cfn = name if line.startswith("cfn=") else None
            elif line.startswith("calls="):
                if (current_cfn is not None and ALLOC_RE.match(current_cfn.split("'")[0])
                        and not TICK_RE.search(current_cfn)):
                    n = int(line[6:].split()[0])
                    allocs += n
                    if detail is not None:
                        detail.append((n, current_cfn))
            elif line.startswith("summary:"):
                total = int(line.split()[1])
            elif line.startswith("desc: Trigger:"):
                desc = line.split(":", 2)[2].strip()
    if total is None:
        total = 0
    return total, allocs, desc


def cmd_dump(args):
    detail = []
    total, allocs, desc = read_dump(args[0], detail)
    print(f"ir={total} allocs={allocs} desc={desc}")
    for n, chain in detail:
        sys.stderr.write(f"gate: allocation site ({n} calls): {chain.replace(chr(39), ' <- ')}\n")


def cmd_compare(args):
    accept = "--accept" in args
    partial = "--partial" in args
    args = [a for a in args if a not in ("--accept", "--partial")]
    base_path, fig_path = args
    with open(fig_path, encoding="utf-8") as f:
        measured = json.load(f)["figures"]
    try:
        with open(base_path, encoding="utf-8") as f:
            base = json.load(f)
    except FileNotFoundError:
        base = {}
    figures = base.get("figures", {})
    tol = base.get("tolerance_pct", {"default": 3.0})
    default_tol = float(tol.get("default", 3.0))
    failed = []
    print(f"{'figure':<40} {'baseline':>12} {'measured':>12} {'delta':>8} {'tol':>6}")
    for name in sorted(set(measured) | set(figures)):
        t = float(tol.get(name, default_tol))
        m = measured.get(name)
        b = figures.get(name)
        if m is None:
            print(f"{name:<40} {b:>12.1f} {'not run' if partial else 'missing':>12}")
            if not partial:
                failed.append(name + " (not measured)")
            continue
        if b is None:
            print(f"{name:<40} {'none':>12} {m:>12.1f} {'new':>8} {t:>5.1f}%")
            failed.append(name + " (no baseline)")
            continue
        delta = (m - b) / b * 100.0 if b else 0.0
        verdict = ""
        if delta > t:
            verdict = "  REGRESSED"
            failed.append(f"{name} (+{delta:.2f}% > {t:.1f}%)")
        elif delta < -t:
            verdict = "  improved: consider --accept"
        print(f"{name:<40} {b:>12.1f} {m:>12.1f} {delta:>+7.2f}% {t:>5.1f}%{verdict}")
    if accept:
        kept = dict(figures) if partial else {}
        kept.update(measured)
        base["figures"] = {k: round(v, 1) for k, v in sorted(kept.items())}
        base.setdefault("tolerance_pct", {"default": 3.0})
        with open(base_path, "w", encoding="utf-8") as f:
            json.dump(base, f, indent=2)
            f.write("\n")
        print(f"accepted: {base_path} rewritten with the figures above")
        return 0
    if failed:
        print("perf gate: FAILED: " + "; ".join(failed))
        return 1
    print("perf gate: ok")
    return 0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "dump":
        cmd_dump(args)
        return 0
    if cmd == "compare":
        return cmd_compare(args)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
