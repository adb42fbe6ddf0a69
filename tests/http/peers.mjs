// Where the pinned npm peers live: $TC_PEERS/npm/node_modules (default <repo>/.peers), as
// scripts/install-peers puts them; `peer(pkg, path)` is a file URL to import.

import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const peers = process.env.TC_PEERS || join(root, ".peers");

export const peer = (pkg, path) => pathToFileURL(join(peers, "npm/node_modules", pkg, path)).href;
