#!/usr/bin/env python3
"""Regenerates fuzz/corpus/<target>/: valid seeds plus deterministic mutations of them.

The corpus is committed; `cargo test` replays every file (shim/tests/parsers.rs,
seal/src/lib.rs, core/src/config.rs) and the stdin fuzz of the real tc-shim sends the
jsonrpc_line files. File names carry the expectation the replay checks:

- `valid-*`   must be accepted (a seed);
- `macd-ok-*` (sealed) a payload MAC'd under the corpus key that must open;
- anything else may be accepted or refused, but only with a named reason
  (sealed: every other file must be refused as `invalid`).

Run from anywhere: `python3 fuzz/gen_corpus.py` (needs `git` for the index seeds).
Deterministic: the same script writes the same files.
"""

import base64
import hashlib
import hmac
import json
import os
import random
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
# The key the sealed-blob replay opens with (seal/src/lib.rs, `CORPUS_KEY`).
SEAL_KEY = bytes([0x42] * 32)

rng = random.Random(20260601)


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


INVALID_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]


def mutate(data, n):
    """n mutations of `data`: truncations, bit flips, byte splices, invalid UTF-8,
    duplicated spans, inserted newlines and carriage returns."""
    out = []
    for i in range(n):
        b = bytearray(data)
        kind = i % 8
        if kind == 0 and b:  # truncation
            b = b[: rng.randrange(len(b))]
        elif kind == 1 and b:  # bit flips
            for _ in range(rng.randint(1, 4)):
                j = rng.randrange(len(b))
                b[j] ^= 1 << rng.randrange(8)
        elif kind == 2 and b:  # random bytes
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif kind == 3:  # invalid UTF-8 spliced in
            j = rng.randrange(len(b) + 1)
            b[j:j] = rng.choice(INVALID_UTF8)
        elif kind == 4 and b:  # duplicate a span
            j = rng.randrange(len(b))
            k = min(len(b), j + rng.randint(1, 40))
            b[k:k] = b[j:k]
        elif kind == 5 and b:  # delete a span
            j = rng.randrange(len(b))
            del b[j : j + rng.randint(1, 20)]
        elif kind == 6:  # structural characters
            j = rng.randrange(len(b) + 1)
            b[j:j] = rng.choice([b"\n", b"\r", b"\r\n", b"\x00", b"{", b"}", b"[", b'"', b"\\", b",", b":"])
        else:  # swap two spans' order
            if len(b) > 4:
                j, k = sorted(rng.sample(range(len(b)), 2))
                b = b[:j] + b[k:] + b[j:k]
        out.append(bytes(b))
    return out


def deep(opening, closing, depth, inner=b"1"):
    return opening * depth + inner + closing * depth


# --------------------------------------------------------------------------- jsonrpc_line
def jsonrpc_line():
    t = "jsonrpc_line"
    seeds = {
        "initialize": {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                                  "clientInfo": {"name": "c", "version": "1"}}},
        "initialized": {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "tools-list": {"jsonrpc": "2.0", "id": "L", "method": "tools/list", "params": {}},
        "tools-call": {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": "write_file", "arguments": {"path": "note.txt", "content": "v1"}}},
        "tools-call-token": {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                             "params": {"name": "write_file",
                                        "arguments": {"path": "a/b.txt", "content": "é\u2028\"\\", "elicit_token": "tok"}}},
        "cancelled": {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}},
        "response": {"jsonrpc": "2.0", "id": "tc-shim-1", "result": {"action": "accept", "content": {"approve": True}}},
        "discover": {"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                     "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}},
        "modern-call": {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "write_file", "arguments": {"path": "x"},
                                   "requestState": "tc1.abc.def", "inputResponses": {"confirm": {"action": "accept"}},
                                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}},
        "echo-unicode": {"jsonrpc": "2.0", "id": 3.5, "method": "echo", "params": {"s": "\u0000\u001f\ud7ff\ue000"}},
        "resources-read": {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "file:///etc/passwd"}},
        "big-id": {"jsonrpc": "2.0", "id": 18446744073709551615, "method": "ping"},
    }
    for name, msg in seeds.items():
        line = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode()
        write(t, f"valid-{name}.jsonl", line + b"\n")
        for i, m in enumerate(mutate(line, 10)):
            write(t, f"mut-{name}-{i:02}.jsonl", m + b"\n")
    # Several messages in one stream, blank and CRLF lines among them.
    multi = b"\r\n".join(json.dumps(m).encode() for m in list(seeds.values())[:5]) + b"\n\n   \n\t\n"
    write(t, "valid-multi.jsonl", multi)
    special = {
        "deep-array-200": deep(b"[", b"]", 200),
        "deep-array-100000": deep(b"[", b"]", 100000),
        "deep-object-129": deep(b'{"a":', b"}", 129),
        "deep-object-20000": deep(b'{"a":', b"}", 20000),
        "deep-params": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + deep(b"[", b"]", 127) + b"}",
        "unclosed-100000": b"[" * 100000,
        "huge-number": b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}',
        "huge-exponent": b'{"jsonrpc":"2.0","id":1e999999999,"method":"ping"}',
        "nan": b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
        "lone-surrogate": b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
        "bad-escape": b'{"jsonrpc":"2.0","id":"\\x41","method":"ping"}',
        "bom": b"\xef\xbb\xbf" + json.dumps(seeds["tools-list"]).encode(),
        "nul": b'{"jsonrpc":"2.0",\x00"id":1}',
        "raw-control": b'{"jsonrpc":"2.0","id":"a\x01b","method":"ping"}',
        "invalid-utf8-key": b'{"\xff":1,"id":1,"method":"ping"}',
        "overlong-utf8": b'{"id":"\xc0\xaf","method":"ping"}',
        "batch": b"[" + json.dumps(seeds["tools-list"]).encode() + b"]",
        "empty-batch": b"[]",
        "scalars": b"1\n\"s\"\ntrue\nnull\n-0\n",
        "trailing-garbage": json.dumps(seeds["tools-list"]).encode() + b" x",
        "two-objects": b"{}{}",
        "long-string-5k": b'{"jsonrpc":"2.0","id":9,"method":"echo","params":"' + b"a" * 5000 + b'"}',
        "long-key": b'{"' + b"k" * 5000 + b'":1}',
        "many-keys": b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(2000)) + b"}",
        "dup-keys": b'{"id":1,"id":"two","method":"ping","method":5}',
        "weird-types": b'{"jsonrpc":2,"id":{"a":[1]},"method":["tools/call"],"params":"x"}',
        "call-bad-params": b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":5,"arguments":[1,2]}}',
        "call-args-string": b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"hello","arguments":"x"}}',
        "cancel-weird": b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"deep":[[]]}}}',
        "meta-weird": b'{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}}',
        "whitespace-only": b" \t\r\n\x0c\n",
        "cr-only": b"\r\r\r",
        "empty": b"",
    }
    for name, data in special.items():
        write(t, f"edge-{name}.jsonl", data + b"\n")


# ------------------------------------------------------------------------ downstream_line
def downstream_line():
    t = "downstream_line"
    text = "x" * 3000
    seeds = {
        "result-id-first": {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": text}]}},
        "result-id-last-str": {"result": {"content": [{"type": "text", "text": "say \"id\":1, \\"}]},
                               "jsonrpc": "2.0", "id": "req-\"9\"\\"},
        "nested-ids": {"jsonrpc": "2.0", "result": {"id": 99, "items": [{"id": "inner"}, ["id", {"id": 3}]]}, "id": 4},
        "error": {"jsonrpc": "2.0", "id": -12, "error": {"code": -32601, "message": "unknown"}},
        "float-id": {"jsonrpc": "2.0", "id": 1.5e3, "result": None},
        "unicode-id": {"jsonrpc": "2.0", "id": "été\u2028", "result": []},
        "request": {"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {"result": 1}},
        "notification": {"jsonrpc": "2.0", "method": "notifications/message", "params": {"id": 5}},
    }
    for name, msg in seeds.items():
        line = json.dumps(msg, ensure_ascii=(name != "unicode-id")).encode()
        write(t, f"valid-{name}.jsonl", line + b"\n")
        for i, m in enumerate(mutate(line, 12)):
            write(t, f"mut-{name}-{i:02}.jsonl", m + b"\n")
    special = {
        "escaped-key-id": b'{"result":1,"\\u0069d":"\\u00e9"}',
        "id-array": b'{"id":[1],"result":1}',
        "id-object": b'{"id":{"id":1},"result":1}',
        "id-null": b'{"id":null,"error":{"code":1}}',
        "id-too-long": b'{"result":1,"id":"' + b"i" * 2000 + b'"}',
        "key-too-long": b'{"' + b"k" * 100000 + b'":1,"id":8,"result":true}',
        "deep-result": b'{"id":2,"result":' + deep(b"[", b"]", 50000) + b"}",
        "unterminated": b'{"id":3,"result":{"text":"unterminated',
        "cut-in-id": b'{"result":1,"id":12',
        "escape-at-end": b'{"id":1,"result":"\\',
        "not-object": b"[1,2,3]",
        "garbage": b"not json at all",
    }
    for name, data in special.items():
        write(t, f"edge-{name}.jsonl", data + b"\n")


# ----------------------------------------------------------------------------------- sealed
def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def seal(payload: bytes) -> str:
    tag = hmac.new(SEAL_KEY, payload, hashlib.sha256).digest()
    return "tc1." + b64(payload) + "." + b64(tag)


def sealed():
    t = "sealed"
    base = {"nonce": "n0", "expires_at_ms": 1_900_000_000_000, "vault": "fs", "tool": "write_file",
            "caller": "stdio", "args_hash": "a" * 64, "state_fp": "b" * 64, "inner": b64(b"\x00\x01inner")}
    valid = {
        "state": base,
        "cursor": dict(base, nonce="n1", inner=b64(json.dumps({"i": 3}).encode())),
        "no-defaults": {k: v for k, v in base.items() if k not in ("state_fp", "inner")},
        "unicode": dict(base, vault="vault-é", tool="t\u2028", caller="c\"\\"),
    }
    blobs = []
    for name, p in valid.items():
        blob = seal(json.dumps(p, separators=(",", ":")).encode())
        blobs.append(blob)
        write(t, f"valid-{name}.txt", blob)
    macd_ok = {
        "extra-field": dict(base, extra=[1, {"x": None}]),
        "negative-expiry": dict(base, expires_at_ms=-1),
        "empty-strings": dict(base, nonce="", vault="", tool="", caller="", args_hash=""),
    }
    for name, p in macd_ok.items():
        write(t, f"macd-ok-{name}.txt", seal(json.dumps(p).encode()))
    macd_bad = {
        "missing-nonce": json.dumps({k: v for k, v in base.items() if k != "nonce"}).encode(),
        "wrong-type": json.dumps(dict(base, expires_at_ms="soon")).encode(),
        "float-expiry": json.dumps(dict(base, expires_at_ms=1.5)).encode(),
        "overflow-expiry": json.dumps(base).encode().replace(b"1900000000000", b"99999999999999999999999"),
        "array": b"[1,2,3]",
        "not-json": b"\xff\xfe not json",
        "empty": b"",
        "deep": deep(b'{"a":', b"}", 300),
        "null": b"null",
        "trailing": json.dumps(base).encode() + b" x",
    }
    for name, p in macd_bad.items():
        write(t, f"macd-bad-{name}.txt", seal(p))
    for i, blob in enumerate(blobs):
        for j, m in enumerate(mutate(blob.encode(), 16)):
            if m != blob.encode():
                write(t, f"mut-{i}-{j:02}.txt", m)
    s = blobs[0]
    payload_b64, tag_b64 = s[4:].split(".")
    tag = base64.urlsafe_b64decode(tag_b64 + "==")
    other_key_tag = hmac.new(bytes(32), base64.urlsafe_b64decode(payload_b64 + "=="), hashlib.sha256).digest()
    special = {
        "empty": "",
        "prefix-only": "tc1.",
        "dots": "tc1..",
        "version-2": "tc2." + s[4:],
        "no-prefix": s[4:],
        "extra-part": s + ".x",
        "padded": s + "==",
        "std-alphabet": s.replace("-", "+").replace("_", "/"),
        "swapped": "tc1." + tag_b64 + "." + payload_b64,
        "short-tag": "tc1." + payload_b64 + "." + b64(tag[:16]),
        "long-tag": "tc1." + payload_b64 + "." + b64(tag + b"\x00"),
        "empty-tag": "tc1." + payload_b64 + ".",
        "other-key": "tc1." + payload_b64 + "." + b64(other_key_tag),
        "zero-tag": "tc1." + payload_b64 + "." + b64(bytes(32)),
        "whitespace": " " + s + "\n",
        "oversize": "tc1." + "A" * (64 * 1024) + "." + tag_b64,
        "unicode": "tc1.é.ü",
    }
    for name, data in special.items():
        write(t, f"edge-{name}.txt", data)


# ----------------------------------------------------------------------------------- config
CONFIGS = {
    "empty": "",
    "daemon": '[daemon]\nsocket = "/run/user/1000/tc/tcd.sock"\ncache_dir = "~/.local/state/tc"\nelicit_ttl_seconds = 120\n[governor]\nmax_response_bytes = 2048\n',
    "design": '''[daemon]
elicit_ttl_seconds = 120
[[vaults]]
id = "notes"
root = "/home/me/notes"
command = ["node", "x.js", "/home/me/notes"]
[[vaults.gates]]
tool = "move_file"
when = { cross_folder = ["source", "destination"] }
targets = { paths = ["source", "destination"] }
[[vaults.gates]]
tool = "git_commit"
targets = { git = "repo_path" }
[[vaults.gates]]
tool = "delete_entities"
targets = { probe = { tool = "open_nodes", arguments = { names = "$entityNames" } } }
[[vaults.gates]]
tool = "run"
targets = "none"
[[vaults.paged]]
tool = "read_multiple_files"
items = "paths"
[vaults.acl]
deny = ["private/**"]
''',
    "targets": '''[[vaults]]
id = "v.1_-"
root = "/srv/v"
legacy_elicitation_shim = true
lean = true
[[vaults.gates]]
tool = "write"
when = { exists = "path", equals = { arg = "mode", value = [1, {a = "b"}] } }
targets = { tree = { root = "dir", glob = "**/*.md" } }
[[vaults.gates]]
tool = "replace"
targets = { matching = { root = "dir", contains = "needle" } }
[[vaults.gates]]
tool = "commit"
targets = { git = "repo_path" }
[vaults.acl]
deny = ["*.key", "secret/**"]
read_only = ["{a,b}/**"]
''',
    "two-vaults": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults]]\nid = "b"\nroot = "/b"\ncommand = []\n',
}

CONFIG_EDGES = {
    "zero-ttl": "[daemon]\nelicit_ttl_seconds = 0\n",
    "negative-ttl": "[daemon]\nelicit_ttl_seconds = -1\n",
    "huge-ttl": "[daemon]\nelicit_ttl_seconds = 99999999999999999999999\n",
    "small-governor": "[governor]\nmax_response_bytes = 1023\n",
    "unknown-key": '[daemon]\nsockett = "/x"\n',
    "unknown-table": "[nope]\n",
    "relative-root": '[[vaults]]\nid = "a"\nroot = "rel"\n',
    "dup-vault": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults]]\nid = "a"\nroot = "/b"\n',
    "bad-id": '[[vaults]]\nid = "a b/c"\nroot = "/a"\n',
    "empty-id": '[[vaults]]\nid = ""\nroot = "/a"\n',
    "no-targets": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "rm"\n',
    "bad-targets-word": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "rm"\ntargets = "all"\n',
    "empty-paths": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "rm"\ntargets = { paths = [] }\n',
    "two-target-kinds": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "rm"\ntargets = { paths = ["p"], git = "r" }\n',
    "bad-glob": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "rm"\ntargets = { tree = { root = "d", glob = "[" } }\n',
    "bad-acl-glob": '[[vaults]]\nid = "a"\nroot = "/a"\n[vaults.acl]\ndeny = ["{a"]\n',
    "probe-args-not-table": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "rm"\ntargets = { probe = { tool = "t", arguments = 5 } }\n',
    "dup-gate": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "rm"\ntargets = "none"\n[[vaults.gates]]\ntool = "rm"\ntargets = "none"\n',
    "paged-no-items": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.paged]]\ntool = "r"\nitems = ""\n',
    "cross-folder-three": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "mv"\nwhen = { cross_folder = ["a", "b", "c"] }\ntargets = "none"\n',
    "dup-key": "[daemon]\nelicit_ttl_seconds = 1\nelicit_ttl_seconds = 2\n",
    "dup-table": "[daemon]\n[daemon]\n",
    "wrong-type": '[daemon]\nelicit_ttl_seconds = "soon"\n',
    "vaults-not-array": 'vaults = "x"\n',
    "deep-array-10000": "x = " + "[" * 10000 + "]" * 10000 + "\n",
    "deep-inline-10000": "x = " + "{a = " * 10000 + "1" + "}" * 10000 + "\n",
    "deep-equals-value": '[[vaults]]\nid = "a"\nroot = "/a"\n[[vaults.gates]]\ntool = "t"\ntargets = "none"\nwhen = { equals = { arg = "a", value = ' + "[" * 60 + "]" * 60 + " } }\n",
    "deep-dotted-key": "a" + ".a" * 5000 + " = 1\n",
    "unterminated-string": '[daemon]\nsocket = "/x\n',
    "unterminated-table": "[daemon\n",
    "nul": "[daemon]\x00\n",
    "long-line": "# " + "x" * 100000 + "\n",
    "bare-cr": "[daemon]\relicit_ttl_seconds = 1\r",
    "crlf": "[daemon]\r\nelicit_ttl_seconds = 5\r\n",
}


def config():
    t = "config"
    for name, text in CONFIGS.items():
        write(t, f"valid-{name}.toml", text)
        for i, m in enumerate(mutate(text.encode(), 16 if text else 4)):
            write(t, f"mut-{name}-{i:02}.toml", m)
    for name, text in CONFIG_EDGES.items():
        write(t, f"edge-{name}.toml", text)
    write(t, "edge-invalid-utf8.toml", b'[daemon]\nsocket = "/\xff"\n')


# --------------------------------------------------------------------------------- gitindex
def git(repo, *args, env=None):
    e = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
             GIT_COMMITTER_EMAIL="t@t", GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
             GIT_COMMITTER_DATE="2026-01-01T00:00:00Z", GIT_CONFIG_GLOBAL="/dev/null",
             GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, env=e)


def index_of(repo):
    """The repo's index with each entry's stat data (times, dev, ino, uid, gid, size)
    zeroed, so the seeds do not depend on the machine; mode, oid, flags, names stay,
    and the trailing SHA-1 is recomputed."""
    with open(os.path.join(repo, ".git", "index"), "rb") as f:
        b = bytearray(f.read())
    version = int.from_bytes(b[4:8], "big")
    at = 12
    for _ in range(int.from_bytes(b[8:12], "big")):
        start = at
        b[at : at + 24] = bytes(24)
        b[at + 28 : at + 40] = bytes(12)
        flags = int.from_bytes(b[at + 60 : at + 62], "big")
        at += 62 + (2 if flags & 0x4000 else 0)
        if version == 4:
            while b[at] & 0x80:
                at += 1
            at += 1
            at = b.index(0, at) + 1
        else:
            nul = b.index(0, at)
            at = start + (nul - start + 8) // 8 * 8
    b[-20:] = hashlib.sha1(bytes(b[:-20])).digest()
    return bytes(b)


def gitindex():
    t = "gitindex"
    seeds = {}
    with tempfile.TemporaryDirectory() as d:
        repo = os.path.join(d, "r")
        os.makedirs(repo)
        git(repo, "init", "-q", "-b", "main")
        for rel, body in [("a.txt", "a"), ("dir/b.txt", "b"), ("dir/sub/c", "c"), ("é ü.md", "u"),
                          ("z" * 120, "long")]:
            p = os.path.join(repo, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(body)
        os.chmod(os.path.join(repo, "a.txt"), 0o755)
        os.symlink("a.txt", os.path.join(repo, "link"))
        git(repo, "add", "-A")
        seeds["v2"] = index_of(repo)
        git(repo, "commit", "-q", "-m", "base")
        seeds["v2-tree-ext"] = index_of(repo)
        with open(os.path.join(repo, "new.txt"), "w") as f:
            f.write("n")
        git(repo, "add", "-N", "new.txt")
        seeds["v3-intent-to-add"] = index_of(repo)
        git(repo, "update-index", "--index-version", "4")
        seeds["v4"] = index_of(repo)
        git(repo, "update-index", "--index-version", "2")
        git(repo, "rm", "-q", "--cached", "new.txt")
        # A merge conflict: stages 1, 2, 3 for one path.
        git(repo, "checkout", "-q", "-b", "other")
        with open(os.path.join(repo, "a.txt"), "w") as f:
            f.write("other")
        git(repo, "commit", "-q", "-am", "other")
        git(repo, "checkout", "-q", "main")
        with open(os.path.join(repo, "a.txt"), "w") as f:
            f.write("main")
        git(repo, "commit", "-q", "-am", "main")
        subprocess.run(["git", "-C", repo, "merge", "-q", "other"], capture_output=True,
                       env=dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1"))
        seeds["v2-conflict"] = index_of(repo)
    for name, data in seeds.items():
        write(t, f"valid-{name}.bin", data)
        for i, m in enumerate(mutate(data, 24)):
            write(t, f"mut-{name}-{i:02}.bin", m)
    v2 = seeds["v2"]
    v4 = seeds["v4"]
    hdr = lambda v, n: b"DIRC" + v.to_bytes(4, "big") + n.to_bytes(4, "big")
    special = {
        "empty": b"",
        "signature-only": b"DIRC",
        "no-count": b"DIRC\x00\x00\x00\x02",
        "zero-entries": hdr(2, 0),
        "count-max": hdr(2, 0xFFFFFFFF) + v2[12:],
        "count-max-nothing": hdr(4, 0xFFFFFFFF),
        "version-1": hdr(1, 0) ,
        "version-5": hdr(5, 1) + v2[12:],
        "version-max": hdr(0xFFFFFFFF, 1) + v2[12:],
        "v2-as-v4": hdr(4, int.from_bytes(v2[8:12], "big")) + v2[12:],
        "v4-as-v2": hdr(2, int.from_bytes(v4[8:12], "big")) + v4[12:],
        "v4-as-v3": hdr(3, int.from_bytes(v4[8:12], "big")) + v4[12:],
        "v4-huge-varint": hdr(4, 1) + bytes(62) + b"\xff" * 20 + b"\x00name\x00",
        "v4-strip-too-long": hdr(4, 1) + bytes(62) + b"\x05name\x00",
        "v4-no-nul": hdr(4, 1) + bytes(62) + b"\x00name",
        "v2-no-nul": hdr(2, 1) + bytes(62) + b"name",
        "v2-extended-flag": hdr(2, 1) + bytes(60) + b"\x40\x04" + b"\x00\x00name\x00\x00",
        "v3-extended-cut": hdr(3, 1) + bytes(60) + b"\x40\x04",
        "v2-padding-cut": hdr(2, 1) + bytes(62) + b"ab\x00",
        "wrong-signature": b"DIRX" + v2[4:],
        "lowercase-signature": b"dirc" + v2[4:],
    }
    for name, data in special.items():
        write(t, f"edge-{name}.bin", data)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    jsonrpc_line()
    downstream_line()
    sealed()
    config()
    gitindex()
    for target in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, target))
        size = sum(os.path.getsize(os.path.join(OUT, target, f)) for f in files)
        print(f"{target}: {len(files)} files, {size} bytes")


if __name__ == "__main__":
    main()
