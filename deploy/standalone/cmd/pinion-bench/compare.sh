#!/usr/bin/env bash
# Compares two builds of Pinion in one sitting: the working tree and the
# revision BASE (a commit, tag or branch), each started as `make run` starts
# it on a fresh data directory, driven by this tree's pinion-bench (-url),
# one build at a time, alternating, ROUNDS times each. It prints every
# run's lines, then per operation the median req/s, p50 and p99 of each
# build (and p99 / p50) and the ratio this / base, and the server's CPU per request (its
# worker processes included) with the ratio base / this. Machines differ
# from day to day: only the ratio, taken in one sitting, says which build
# is faster; CPU per request moves least with the machine's other load.
#
#   BASE=e29f1b3 ROUNDS=3 ONLY=token,read deploy/standalone/cmd/pinion-bench/compare.sh [pinion-bench flags]
#
# (make bench-compare sets these from the make variables of the same names.)
# ONLY=shapes grows each run's store to 100,000 Patients (-grow to change
# it), some six minutes a run: ROUNDS=3 is three quarters of an hour.
# ONLY=create,update,tx10,bots with -grow 100000 measures each at 1k, grows
# the store, and measures each again at 100k, in every run.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
: "${BASE:?BASE names the revision to compare with}"
ROUNDS=${ROUNDS:-3}
ONLY=${ONLY:-token,read}
PORT=${PORT:-18193}
work=$(mktemp -d /tmp/pinion-compare-XXXX)
# A bench that fails stops the script (set -e): its server must not
# outlive it, holding the port for the next comparison.
server=
trap '[ -z "$server" ] || kill "$server" 2>/dev/null || true; git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

echo "compare: building this tree and $BASE (a minute or two)"
go build -trimpath -o "$work/this" ./deploy/standalone/cmd/pinion
go build -trimpath -o "$work/bench" ./deploy/standalone/cmd/pinion-bench
git worktree add --detach "$work/base" "$BASE" >/dev/null
(cd "$work/base" && go build -trimpath -o "$work/base-pinion" ./deploy/standalone/cmd/pinion)

# run BIN LABEL: one round of the bench against BIN, its lines tagged LABEL.
run() {
	local dir
	dir=$(mktemp -d "$work/data-XXXX")
	PINION_DATA_DIR=$dir PINION_ADDR=127.0.0.1:$PORT PINION_BASE_URL=http://127.0.0.1:$PORT/ \
		PINION_SUPERADMIN_CLIENT_ID=compare-super PINION_SUPERADMIN_CLIENT_SECRET=compare-super-secret-0123456789abcdefghij \
		PINION_AUTH_RATE_LIMIT=0 PINION_LOG_LEVEL=warn "$1" >"$dir/log" 2>&1 &
	local pid=$!
	server=$pid
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
		kill -0 $pid 2>/dev/null || { cat "$dir/log"; exit 1; }
		sleep 0.1
	done
	PINION_SUPERADMIN_CLIENT_ID=compare-super PINION_SUPERADMIN_CLIENT_SECRET=compare-super-secret-0123456789abcdefghij \
		"$work/bench" -url "http://127.0.0.1:$PORT/" -server-pid "$pid" -only "$ONLY" "${@:3}" | grep ' req/s ' | sed "s/^/$2|/" | tee -a "$work/results"
	kill $pid
	wait $pid 2>/dev/null || true
	server=
	rm -rf "$dir"
}

for i in $(seq "$ROUNDS"); do
	echo "== round $i of $ROUNDS"
	run "$work/this" this "$@"
	run "$work/base-pinion" base "$@"
done

echo
echo "medians of $ROUNDS runs each: this tree / $BASE"
awk -F'|' '
	{
		split($2, f, " req/s ")
		name = f[1]; sub(/ +[0-9.]+$/, "", name)
		n = split(f[1], w, " "); rps = w[n]
		match($2, /p50 +[0-9.]+/); p50 = substr($2, RSTART + 4, RLENGTH - 4) + 0
		if (!match($2, /p99 +[0-9.]+/)) { print "compare: no p99 in: " $0 > "/dev/stderr"; next }
		p99 = substr($2, RSTART + 4, RLENGTH - 4) + 0
		k = $1 SUBSEP name
		c[k]++; r[k, c[k]] = rps; a[k, c[k]] = p50; b[k, c[k]] = p99
		# The server CPU per request: steady where req/s moves with other load.
		u[k, c[k]] = match($2, /cpu +[0-9.]+/) ? substr($2, RSTART + 4, RLENGTH - 4) + 0 : 0
		# Failed requests count in req/s: a build that fails fast must show it.
		if (match($2, /errors +[0-9]+/)) e[k] += substr($2, RSTART + 7, RLENGTH - 7)
		if (!(name in seen)) { seen[name] = 1; order[++ops] = name }
	}
	function med(arr, k, m,   i, j, t, v) {
		for (i = 1; i <= m; i++) v[i] = arr[k, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
		return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
	}
	END {
		printf "%-44s %12s %12s %7s   %-58s %s\n", "operation", "this req/s", "base req/s", "ratio", "p50 / p99 ms (p99 / p50), this | base", "cpu ms/req, this | base"
		for (o = 1; o <= ops; o++) {
			t = "this" SUBSEP order[o]; s = "base" SUBSEP order[o]
			if (!c[t] || !c[s]) continue
			rt = med(r, t, c[t]); rb = med(r, s, c[s])
			# The tail of each build as a multiple of its median: p99 / p50.
			pt = med(a, t, c[t]); qt = med(b, t, c[t]); ps = med(a, s, c[s]); qs = med(b, s, c[s])
			printf "%-44s %12.0f %12.0f %6.2fx   %-58s", order[o], rt, rb, rt / rb,
				sprintf("%.3f / %.3f (%.1fx) | %.3f / %.3f (%.1fx)", pt, qt, pt > 0 ? qt / pt : 0, ps, qs, ps > 0 ? qs / ps : 0)
			ut = med(u, t, c[t]); ub = med(u, s, c[s])
			if (ut > 0 && ub > 0) printf " %.3f | %.3f (%.2fx)", ut, ub, ub / ut
			if (e[t] || e[s]) printf "   errors %d | %d", e[t], e[s]
			printf "\n"
		}
	}' "$work/results"
