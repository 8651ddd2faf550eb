#!/usr/bin/env bash
# Builds pulumi-eks's own TypeScript implementation (nodejs/eks) outside the repository, as its
# release build does (`yarn tsc` with its own tsconfig.json), so record.js can construct its Cluster.
#   build.sh <pulumi-eks git dir> <commit> <work dir>
# The runtime dependencies are upstream's package.json `dependencies`, at the versions its yarn.lock
# resolves (`@pulumi/pulumi` included); the compiler and type packages at the lock's versions too.
# Needs git, node and npm (the npm registry). Nothing is written inside the repository.
set -euo pipefail
git_dir=$1 commit=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
git --git-dir="$git_dir" archive "$commit" nodejs/eks | tar -x -C "$work"
cd "$work/nodejs/eks"
node - <<'JS'
const fs = require("fs");
const lock = fs.readFileSync("yarn.lock", "utf8");
// The version yarn.lock resolves for a `name@range` entry of package.json.
function locked(name, range) {
    const key = `${name}@${range}`;
    for (const block of lock.split("\n\n")) {
        const [head, ...rest] = block.trim().split("\n");
        const names = head.replace(/:$/, "").split(",").map((s) => s.trim().replace(/^"|"$/g, ""));
        if (names.includes(key)) return rest.find((l) => l.trim().startsWith("version ")).trim().split('"')[1];
    }
    throw new Error(`yarn.lock has no entry for ${key}`);
}
const upstream = JSON.parse(fs.readFileSync("package.json", "utf8"));
const pick = (names) => Object.fromEntries(names.map((n) => [n, locked(n, upstream.devDependencies[n])]));
// A locked version the registry does not serve is replaced by the newest one of the same major
// version below it; every replacement is written to substitutions.json (the generator records it).
const { execFileSync } = require("child_process");
const semver = (v) => v.split(/[.-]/).slice(0, 3).map(Number);
const below = (a, b) => { const [x, y] = [semver(a), semver(b)]; for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] < y[i]; return false; };
const substitutions = {};
function served(name, version) {
    const all = JSON.parse(execFileSync("npm", ["view", name, "versions", "--json"], { encoding: "utf8" }));
    if (all.includes(version)) return version;
    const candidates = all.filter((v) => !v.includes("-") && semver(v)[0] === semver(version)[0] && below(v, version));
    if (!candidates.length) throw new Error(`the registry serves no ${name} at or below ${version}`);
    const chosen = candidates[candidates.length - 1];
    substitutions[name] = { locked: version, installed: chosen };
    console.error(`${name}: ${version} is not on the registry; installing ${chosen}`);
    return chosen;
}
const dependencies = Object.fromEntries(
    Object.entries(upstream.dependencies).map(([n, r]) => [n, served(n, locked(n, r))]),
);
fs.writeFileSync("substitutions.json", JSON.stringify(substitutions, null, 2));
const devDependencies = pick(["typescript", "@types/node", "@types/js-yaml", "@types/netmask", "@types/semver", "@types/which"]);
fs.writeFileSync("package.json", JSON.stringify({ name: "pulumi-eks-impl", private: true, dependencies, devDependencies }, null, 2));
JS
npm install --no-audit --no-fund --ignore-scripts --loglevel=error
# Only the implementation: upstream's own tests need jest, which the build leaves out.
find . -path ./node_modules -prune -o -name '*.test.ts' -exec rm {} +
npx --no-install tsc -p tsconfig.json
