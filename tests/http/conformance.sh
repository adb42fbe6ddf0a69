#!/usr/bin/env bash
# Runs the MCP conformance suite (server mode) against URL under Node 22 and writes one JSON
# summary to OUT: per scenario, its checks' ids and statuses (the baseline a run through tc
# is compared with, check by check). Extra arguments go to `conformance server`; without
# them: `--suite all` (every era-applicable scenario, each at its own wire version). Usual
# extras: `--spec-version 2025-11-25` or `2026-07-28`, `--scenario NAME`.
# Exit: 0 when OUT was written (whatever the checks say), 1 when the suite could not run.
# Usage: tests/http/conformance.sh URL OUT.json [conformance server args...]
set -euo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 URL OUT.json [conformance server args...]" >&2; exit 1; }
URL="$1"
OUT="$2"
shift 2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PEERS="${TC_PEERS:-$ROOT/.peers}"
NODE="$PEERS/node22/bin/node"
CLI="$PEERS/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[[ -x "$NODE" && -f "$CLI" ]] || { echo "conformance.sh: run scripts/install-peers first ($PEERS)" >&2; exit 1; }
[[ $# -gt 0 ]] || set -- --suite all

RESULTS="$(mktemp -d)"
trap 'rm -rf "$RESULTS"' EXIT
# The suite exits non-zero whenever a check fails; that is data here, not an error.
"$NODE" "$CLI" server --url "$URL" -o "$RESULTS" --timeout "${CONFORMANCE_TIMEOUT_MS:-15000}" "$@" \
  >"$RESULTS/log.txt" 2>&1 || true

VERSION="$("$NODE" -p "require('$(dirname "$CLI")/../package.json').version")"
python3 - "$RESULTS" "$OUT" "$URL" "$VERSION" "$*" <<'EOF'
import json, os, re, sys

results, out, url, version, args = sys.argv[1:6]
scenarios = {}
for d in sorted(os.listdir(results)):
    m = re.fullmatch(r"server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z", d)
    if not m:
        continue
    path = os.path.join(results, d, "checks.json")
    if not os.path.exists(path):
        scenarios[m.group(1)] = {"error": "no checks.json"}
        continue
    checks = [{"id": c["id"], "status": c["status"]} for c in json.load(open(path))]
    count = lambda s: sum(c["status"] == s for c in checks)
    scenarios[m.group(1)] = {
        "passed": count("SUCCESS"),
        "failed": count("FAILURE"),
        "warnings": count("WARNING"),
        "checks": checks,
    }
if not scenarios:
    sys.stderr.write(open(os.path.join(results, "log.txt")).read()[-4000:])
    sys.exit("conformance.sh: the suite produced no results")
with open(out, "w") as f:
    json.dump({"url": url, "conformance": version, "args": args, "scenarios": scenarios}, f, indent=1)
    f.write("\n")
EOF
