#!/usr/bin/env bash
# gpudoctor gate for Slurm nodes: as HealthCheckProgram (drains and resumes the node itself) or as
# a Prolog (answers with its exit status only). See docs/slurm.md for the slurm.conf settings.
#
#   gpudoctor-healthcheck.sh --health-check   periodic (HealthCheckProgram): on no-go drain the node
#                                             with Reason "gpudoctor: <first blocking finding>"; once
#                                             the gate passes, resume it, but only if it was drained
#                                             by gpudoctor (reason prefix "gpudoctor:", or Slurm's
#                                             "Prolog error" right after this script failed a prolog)
#   gpudoctor-healthcheck.sh --prolog         before a job (Prolog): exit 1 on no-go, so slurmd drains
#                                             the node ("Prolog error") and requeues the job; no Slurm
#                                             commands, as Slurm's prolog guide asks
# Without an option: --prolog when SLURM_JOB_ID is set, else --health-check.
#
# Settings (environment, or /etc/default/gpudoctor (GPUDOCTOR_DEFAULTS), sourced first when present):
#   GPUDOCTOR            the gpudoctor command (default: gpudoctor on PATH)
#   GPUDOCTOR_POLICY     policy file (default: /etc/gpudoctor/policy.yaml when it exists)
#   GPUDOCTOR_TIMEOUT    the gate's deadline in seconds (default 40 for --health-check: Slurm kills
#                        HealthCheckProgram after 60 s; 20 for --prolog)
#   GPUDOCTOR_ARGS       more arguments for `gpudoctor gate` (word-split), e.g. "--expect-gpus 8"
#   GPUDOCTOR_STATE_DIR  last report (last-gate.json) and the prolog marker (default /var/lib/gpudoctor)
#   GPUDOCTOR_PROMETHEUS also write node_exporter textfile metrics to this path
#   GPUDOCTOR_DRAIN_ON_ERROR=1   drain also when gpudoctor itself cannot run (exit 2); default: log
#                                only, so a broken checker never drains a fleet
#   GPUDOCTOR_PROLOG_DRAIN=1     in --prolog, set the "gpudoctor:" drain reason with scontrol before
#                                failing (Slurm advises against Slurm commands in prologs; off)
#   GPUDOCTOR_NODE       this node's Slurm name (default: $SLURMD_NODENAME, else hostname -s)
#   SCONTROL, SINFO      the Slurm commands (default: on PATH)
# Exit status: --health-check always 0 (Slurm ignores it); --prolog 0 go, 1 no-go.

set -u
# Slurm runs prologs and health checks without a search path.
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
DEFAULTS="${GPUDOCTOR_DEFAULTS:-/etc/default/gpudoctor}"
# shellcheck source=/dev/null  # the site's settings file
[ -r "$DEFAULTS" ] && . "$DEFAULTS"

PREFIX="gpudoctor:"
MODE=""
case "${1:-}" in
  --health-check) MODE=health ;;
  --prolog) MODE=prolog ;;
  "") if [ -n "${SLURM_JOB_ID:-}" ]; then MODE=prolog; else MODE=health; fi ;;
  *) echo "usage: $0 [--health-check | --prolog]" >&2; exit 2 ;;
esac

GPUDOCTOR="${GPUDOCTOR:-gpudoctor}"
SCONTROL="${SCONTROL:-scontrol}"
SINFO="${SINFO:-sinfo}"
STATE_DIR="${GPUDOCTOR_STATE_DIR:-/var/lib/gpudoctor}"
MARKER="$STATE_DIR/prolog-failed"
NODE="${GPUDOCTOR_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}"
if [ "$MODE" = prolog ]; then TIMEOUT="${GPUDOCTOR_TIMEOUT:-20}"; else TIMEOUT="${GPUDOCTOR_TIMEOUT:-40}"; fi
POLICY="${GPUDOCTOR_POLICY:-}"
if [ -z "$POLICY" ] && [ -r /etc/gpudoctor/policy.yaml ]; then POLICY=/etc/gpudoctor/policy.yaml; fi

log() {
  echo "gpudoctor-healthcheck ($MODE, $NODE): $*" >&2
  command -v logger >/dev/null 2>&1 && logger -t gpudoctor -- "$MODE $NODE: $*"
  return 0
}

mkdir -p "$STATE_DIR" 2>/dev/null || true

# --- run the gate: RC and LINE (its first blocking finding) ---------------------------------
ARGS=(gate --no-color --timeout "$TIMEOUT" --json "$STATE_DIR/last-gate.json")
[ -n "$POLICY" ] && ARGS+=(--policy "$POLICY")
[ -n "${GPUDOCTOR_PROMETHEUS:-}" ] && ARGS+=(--prometheus "$GPUDOCTOR_PROMETHEUS")
# shellcheck disable=SC2206  # word splitting of GPUDOCTOR_ARGS is the point
[ -n "${GPUDOCTOR_ARGS:-}" ] && ARGS+=(${GPUDOCTOR_ARGS})

OUT="$(mktemp "${TMPDIR:-/tmp}/gpudoctor-gate.XXXXXX")" || { log "cannot create a temporary file"; exit 0; }
trap 'rm -f "$OUT" "$OUT.err"' EXIT
# The gate keeps its own deadline; `timeout` is the backstop should the gate itself get stuck.
if command -v timeout >/dev/null 2>&1; then
  timeout --kill-after=5 "$((TIMEOUT + 15))" "$GPUDOCTOR" "${ARGS[@]}" >"$OUT" 2>"$OUT.err"
else
  "$GPUDOCTOR" "${ARGS[@]}" >"$OUT" 2>"$OUT.err"
fi
RC=$?
LINE="$(sed -n 's/^NO-GO  //p' "$OUT" | head -n 1)"
case "$RC" in
  0 | 1) ;;
  124 | 137) RC=1; LINE="the gate did not finish within $((TIMEOUT + 15)) s and was killed (a hung driver?)" ;;
  *)
    ERR="$(head -n 1 "$OUT.err")"
    if [ "${GPUDOCTOR_DRAIN_ON_ERROR:-0}" = 1 ]; then
      LINE="gpudoctor could not run (exit status $RC): ${ERR:-no message}"
      RC=1
    else
      log "gpudoctor could not run (exit status $RC): ${ERR:-no message}; node left as it is"
      exit 0
    fi
    ;;
esac
[ "$RC" = 1 ] && [ -z "$LINE" ] && LINE="no-go (see $STATE_DIR/last-gate.json)"
# Slurm keeps the reason on one line; keep it short enough to read in `sinfo -R`.
REASON="$PREFIX $(printf '%s' "$LINE" | tr '\n\r\t' '   ' | cut -c 1-200)"

# --- prolog: the exit status is the answer ----------------------------------------------------
if [ "$MODE" = prolog ]; then
  if [ "$RC" = 0 ]; then
    rm -f "$MARKER"
    exit 0
  fi
  printf 'job=%s time=%s %s\n' "${SLURM_JOB_ID:-?}" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$REASON" >"$MARKER" 2>/dev/null
  log "NO-GO: $LINE"
  if [ "${GPUDOCTOR_PROLOG_DRAIN:-0}" = 1 ]; then
    "$SCONTROL" update "NodeName=$NODE" State=DRAIN "Reason=$REASON" || log "scontrol update failed"
  fi
  exit 1
fi

# --- health check: drain or resume -------------------------------------------------------------
STATE_REASON="$("$SINFO" --noheader --Node --nodes="$NODE" --format='%T|%E' 2>/dev/null | head -n 1)"
STATE="${STATE_REASON%%|*}"
CURRENT="${STATE_REASON#*|}"
DRAINED=0
case "$STATE" in *drain*|*DRAIN*) DRAINED=1 ;; esac
OURS=0
case "$CURRENT" in "$PREFIX"*) OURS=1 ;; esac
# slurmd drains a node whose prolog failed with the reason "Prolog error"; the marker says it was ours.
case "$CURRENT" in "Prolog error"*) [ -f "$MARKER" ] && OURS=1 ;; esac

if [ "$RC" = 0 ]; then
  if [ "$DRAINED" = 1 ] && [ "$OURS" = 1 ]; then
    if "$SCONTROL" update "NodeName=$NODE" State=RESUME; then
      log "gate passes again: resumed (was drained: $CURRENT)"
      rm -f "$MARKER"
    else
      log "gate passes but scontrol could not resume the node"
    fi
  fi
  exit 0
fi

if [ "$DRAINED" = 1 ] && [ "$OURS" = 0 ]; then
  log "NO-GO: $LINE (node already drained by someone else: '$CURRENT'; left as it is)"
  exit 0
fi
if [ "$DRAINED" = 1 ] && [ "$CURRENT" = "$REASON" ]; then
  exit 0  # already drained for this very reason
fi
if "$SCONTROL" update "NodeName=$NODE" State=DRAIN "Reason=$REASON"; then
  log "NO-GO: drained: $LINE"
else
  log "NO-GO: $LINE (scontrol could not drain the node)"
fi
exit 0
