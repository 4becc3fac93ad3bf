#!/usr/bin/env bash
# The GPU checks of docs/gpu.md in one call of a short-lived GPU machine, each stage under its own
# time limit, so one stage that runs long leaves the others their time.  From the repository root:
#
#   . benchmarks/gpu_carry.sh install                   # after `benchmarks/gpu_carry.sh pack` here
#   bash benchmarks/gpu_session.sh tests mfu blocks     # any of: tests mfu blocks search ladder transfer rotary
#   bash benchmarks/gpu_session.sh mfu search ladder+tests-shared   # a+b: a and b at the same time
#
# `tests` is `tests-shared` (the GPU suite, 8 in parallel) then `tests-alone` (the two tests that fill
# or share the whole GPU).  `a+b` runs stages side by side: only for stages whose timings are not
# reported (the tests beside the ladder, whose losses do not depend on speed), never `mfu` or `blocks`.
# Everything goes to $OUT (default gpu_out/): session.log (all output), mfu_section.md and
# blocks_section.md (tables for docs/BENCHMARKS.md), profile_table_MODEL.txt, search.log, ladder.log,
# ladder.md, rotary.md and rotary_code.py (a device call brings back 8 files at most).
# Stage limits in seconds: TESTS_S, ALONE_S (the two tests that run alone), MFU_S, BLOCKS_S, SEARCH_S,
# LADDER_S, TRANSFER_S, ROTARY_S.  MFU_ROWS and BLOCKS choose benchmarks/gpu_mfu.py's --rows and --blocks (say
# BLOCKS=mha,sliding_window).  SEARCH_FLOPS, SEARCH_TRIALS, LADDER_SIZES, WORKERS (default 2) and
# GPUS_PER_TRIAL (default 0.5) size the search and the ladder; `ladder` continues the study `search`
# made (STUDY, default gpu, in RUNS, default /tmp/gpu_runs).  SPACE, GPUS_PER_TRIAL and COMPILE
# (true/false) exist for a dry run of those two stages on a CPU: SPACE=search_spaces/default.yaml
# GPUS_PER_TRIAL=0 COMPILE=false.  `transfer` writes transfer.md (with its plot), transfer.log and
# transfer_none.json; TRANSFER_SIZES, TRANSFER_SEEDS, TWORKERS (default 4), TGPUS (default 0.25),
# TFLOPS (size 1's budget), TSPACE, TSTUDY and CODE (the corpus directory, built when absent) size it;
# a CPU dry run: TGPUS=0 TWORKERS=2 TFLOPS=2e12 TRANSFER_SIZES=0.25,0.5,1,2 TRANSFER_SEEDS=1 TRANSFER_S=3000.
OUT=${OUT:-gpu_out}
RUNS=${RUNS:-/tmp/gpu_runs}
STUDY=${STUDY:-gpu}
mkdir -p "$OUT"
LOG="$OUT/session.log"
export PYTHONUNBUFFERED=1
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$LOG"
python3 -c "import torch, optuna, ray; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'optuna', optuna.__version__, 'ray', ray.__version__)" 2>&1 | tee -a "$LOG"

run_stage() {
    case "$1" in
    tests)
        run_stage tests-shared
        run_stage tests-alone
        ;;
    tests-shared)
        say "tests (parallel part)"
        # the two tests that fill or share the whole GPU run alone afterwards; no -q (pyproject's
        # addopts has one, and -qq drops the count line)
        timeout "${TESTS_S:-240}" python3 -m pytest -m gpu tests/gpu -n 8 -p no:cacheprovider \
            --timeout 160 -k "not out_of_memory and not share_one_gpu" 2>&1 | tail -40 | tee -a "$LOG"
        ;;
    tests-alone)
        say "tests (alone)"
        timeout "${ALONE_S:-90}" python3 -m pytest -m gpu tests/gpu -p no:cacheprovider --timeout 80 \
            -k "out_of_memory or share_one_gpu" 2>&1 | tail -20 | tee -a "$LOG"
        ;;
    mfu)
        say "mfu"
        timeout "${MFU_S:-200}" python3 benchmarks/gpu_mfu.py --parts mfu,profile --out "$OUT" \
            --doc "$OUT/mfu_section.md" ${MFU_ROWS:+--rows "$MFU_ROWS"} 2>&1 | grep -v "^wrote" | tee -a "$LOG"
        ;;
    blocks)
        say "blocks"
        timeout "${BLOCKS_S:-110}" python3 benchmarks/gpu_mfu.py --parts blocks \
            --doc "$OUT/blocks_section.md" ${BLOCKS:+--blocks "$BLOCKS"} 2>&1 | tee -a "$LOG"
        ;;
    search)
        say "search"
        # a compiled gpu.yaml search on the token corpus (gpu_carry.sh pack made the tokenizer)
        timeout "${SEARCH_S:-200}" python3 run_search.py search --space "${SPACE:-search_spaces/gpu.yaml}" \
            --study "$STUDY" --data shakespeare --tokenizer .gpu_carry/tokenizer.json \
            --resources.compile "${COMPILE:-true}" --search.trials "${SEARCH_TRIALS:-4}" \
            --resources.workers "${WORKERS:-2}" --resources.gpus_per_trial "${GPUS_PER_TRIAL:-0.5}" \
            --budget.flops "${SEARCH_FLOPS:-2e15}" --runs-dir "$RUNS" --no-tensorboard 2>&1 \
            | tee "$OUT/search.log" | tail -40 | tee -a "$LOG"
        ;;
    ladder)
        say "ladder"
        # the search's best and its baselines at 0.5x to 2x its parameters, on the search's budget
        # per parameter, with --check: how well a fit of the smaller sizes predicts the largest at 10
        # to 100x the CPU scale (docs/ladder.md).  Eager: a compile per run would cost more than the run.
        timeout "${LADDER_S:-240}" python3 run_search.py ladder --study "$STUDY" --runs-dir "$RUNS" \
            --top 1 --sizes "${LADDER_SIZES:-0.5,0.71,1,1.41,2}" --check --resources.workers "${WORKERS:-2}" \
            --resources.gpus_per_trial "${GPUS_PER_TRIAL:-0.5}" --no-tensorboard \
            --report "$OUT/ladder.md" --force 2>&1 | tee "$OUT/ladder.log" | tail -40 | tee -a "$LOG"
        ;;
    transfer)
        say "transfer"
        # the measured ladder at GPU scale (docs/RESULTS.md, "A ladder measured 4x beyond its fit"): a
        # corpus of the machine's own Python source (over 50M byte-level tokens, built here: nothing that
        # large can travel with a call), the one point of benchmarks/spaces/transfer_gpu.yaml, then it and
        # four baselines under completep at 0.25 to 16, the two largest held out, checked by rollout with
        # a shared E (the report) and without (transfer_none.json)
        CODE=${CODE:-/tmp/code_corpus}
        [ -d "$CODE" ] || python3 benchmarks/code_corpus.py "$CODE" 2>&1 | tee -a "$LOG"
        python3 run_search.py search --space "${TSPACE:-benchmarks/spaces/transfer_gpu.yaml}" \
            --study "${TSTUDY:-transfer_gpu}" --data "$CODE" --runs-dir "$RUNS" --resources.workers 1 \
            --resources.gpus_per_trial "${TGPUS:-0.25}" ${TFLOPS:+--budget.flops "$TFLOPS"} --no-tensorboard \
            2>&1 | tail -3 | tee -a "$LOG"
        tflags=(--study "${TSTUDY:-transfer_gpu}" --runs-dir "$RUNS" --top 1 --baseline vanilla
            --baseline transformer_pp --baseline experiments/archs/probes/hybrid_gla.yaml
            --baseline experiments/archs/probes/hybrid_hyena.yaml --sizes "${TRANSFER_SIZES:-0.25,0.5,1,2,4,8,16}"
            --seeds "${TRANSFER_SEEDS:-2,2,2,2,2,1,1}" --check rollout)
        # trained under the stage's limit; then reported from the runs it holds, finished or not
        timeout "${TRANSFER_S:-420}" python3 run_search.py ladder "${tflags[@]}" \
            --resources.workers "${TWORKERS:-4}" --resources.gpus_per_trial "${TGPUS:-0.25}" --no-tensorboard \
            2>&1 | tee "$OUT/transfer.log" | tail -40 | tee -a "$LOG"
        python3 run_search.py ladder "${tflags[@]}" --share E --no-train --report "$OUT/transfer.md" --force \
            2>&1 | tail -20 | tee -a "$LOG"
        python3 run_search.py ladder "${tflags[@]}" --share none --no-train --json >"$OUT/transfer_none.json" \
            2>>"$LOG"
        ;;
    rotary)
        say "rotary"
        # Transformer++'s rotary backward, form by form (benchmarks/gpu_rotary.py), and inductor's code
        timeout "${ROTARY_S:-150}" python3 benchmarks/gpu_rotary.py --code "$OUT/rotary_code.py" 2>&1 \
            | tee "$OUT/rotary.md" | tee -a "$LOG"
        ;;
    *) say "unknown stage $1 (tests tests-shared tests-alone mfu blocks search ladder transfer rotary)" ;;
    esac
}

for stage in "$@"; do
    if [[ "$stage" == *+* ]]; then  # side by side
        IFS=+ read -ra parts <<<"$stage"
        for part in "${parts[@]}"; do run_stage "$part" & done
        wait
    else
        run_stage "$stage"
    fi
done
say "done"
