#!/usr/bin/env bash
# The vkattn command line: exit codes 0 / 1 / 2 and one-line errors on stderr.
# Usage: cli_test.sh path/to/vkattn
set -u
vkattn=$1
passed=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# As a newcomer runs it: tuning on, no plan remembered yet (the suite's tests run with it off)
# (Mesa's compiled shaders stay where they were: they are not plans, and compiling them all again
# is what would cost)
cache_home=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
[[ -n ${MESA_SHADER_CACHE_DIR:-} || -z $cache_home ]] || export MESA_SHADER_CACHE_DIR=$cache_home
export VKATTN_TUNE=on XDG_CACHE_HOME=$tmp/cache

# expect CODE DESCRIPTION -- ARGS…: runs vkattn ARGS, checks the exit code, and for errors that
# stderr is exactly one line.
expect() {
  local code=$1 what=$2
  shift 3
  "$vkattn" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$? lines
  lines=$(wc -l <"$tmp/err")
  if [[ $got -ne $code ]]; then
    echo "FAIL $what: exit $got, expected $code"; cat "$tmp/err"; failed=$((failed + 1)); return
  fi
  if [[ $code -ne 0 && $lines -ne 1 ]]; then
    echo "FAIL $what: $lines lines on stderr, expected 1"; cat "$tmp/err"; failed=$((failed + 1)); return
  fi
  echo "ok   $what"; passed=$((passed + 1))
}

expect 0 "devices lists lavapipe" -- devices
grep -q llvmpipe "$tmp/out" || { echo "FAIL devices: llvmpipe not listed"; failed=$((failed + 1)); }
# every line within 100 columns, whatever numbers the devices' limits are
if wide=$(/usr/bin/python3 -c 'import sys
print("\n".join(l for l in open(sys.argv[1], encoding="utf-8").read().splitlines() if len(l) > 100))' "$tmp/out") &&
  [[ -n $wide ]]; then
  echo "FAIL devices: lines over 100 columns:"; echo "$wide"; failed=$((failed + 1))
fi
expect 0 "demo: GPU matches the reference" -- demo
grep -q "every step agrees: gpu and cpu within" "$tmp/out" || { echo "FAIL demo: no agreement line"; failed=$((failed + 1)); }
expect 0 "demo: causal cross-attention, awkward sizes" -- demo --batch 3 --seq 17 --kv-seq 113 --embed 24 --heads 6 --causal
expect 2 "no subcommand" --
expect 2 "unknown subcommand" -- frobnicate
expect 2 "unknown flag" -- demo --bogus
expect 2 "heads not dividing embed" -- demo --embed 10 --heads 3
grep -q "embed_dim=10 is not divisible by num_heads=3" "$tmp/err" || { echo "FAIL: message does not name the rule"; failed=$((failed + 1)); }
expect 2 "zero heads" -- demo --heads 0
expect 2 "non-numeric size" -- demo --seq many
# (without validation: with it, the loader's own complaints are logged too, by design)
VKATTN_VALIDATION=0 VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json expect 1 "no Vulkan driver" -- demo
# Which call fails, and how, is the loader's (Debian 12's 1.3 loader fails vkCreateInstance, 1.4's
# may create the instance and find no device): the exit code, one line, and the engine's advice.
grep -q "mesa-vulkan-drivers" "$tmp/err" || { echo "FAIL: no-driver message"; cat "$tmp/err"; failed=$((failed + 1)); }
VKATTN_DEVICE=nosuchgpu expect 1 "unknown device" -- demo
grep -q "matches no device" "$tmp/err" || { echo "FAIL: unknown device message"; failed=$((failed + 1)); }

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
