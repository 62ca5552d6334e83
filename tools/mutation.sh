#!/usr/bin/env bash
# Mutation testing of the correctness-critical modules with mutmut 3 (not part of CI).
#
#   pip install mutmut                       # a tool, not a test dependency
#   tools/mutation.sh                        # verify mask cache tree kernels loop single proposer budget api batch
#   tools/mutation.sh verify mask            # some of them
#   MUTATION_TIMEOUT=420 tools/mutation.sh single   # stop after 7 minutes; rerun to go on
#
# Every module runs in its own copy of the repository, $MUTATION_DIR/<module> (default
# /tmp/lookahead-mutation/<module>; the working tree is never touched), against a fast test
# selection chosen for that module (tests_for below), under the `mutation` Hypothesis profile
# (the derandomized `ci` examples, no shrinking) so a verdict repeats and a failure is quick. mutmut keeps its results in <copy>/mutants/: a rerun goes on
# where the last one stopped and re-tests only functions whose source changed. At the end each
# module prints its counts and score, and the surviving mutants; inspect one with
#   (cd $MUTATION_DIR/<module> && mutmut show <mutant name>)
#
# kernels: mutmut 3 never mutates decorated functions, and every kernel is @njit, so the copy
# has the decorators removed (the kernels then run as plain Python, which is what
# NUMBA_DISABLE_JIT=1 would do too).
#
# Environment: MUTATION_DIR, MUTATION_CHILDREN (parallel workers, default 2),
# MUTATION_TIMEOUT (seconds per module and call, 0 = none), MUTANTS (mutmut names or patterns,
# space-separated, e.g. 'lookahead.drafts.kernels.x_merge_trie*', to (re)test only those mutants of a
# single module: after adding tests, rerun the survivors this way).
#
# Changing a module's test selection (tests_for) makes mutmut reset all its verdicts. Adding
# tests cannot revive a killed mutant (the tests are deterministic under the `mutation`
# profile), so the script keeps the kills and timeouts of functions whose source did not
# change (it lets mutmut reset and re-collect the test mapping on one killed mutant first,
# then puts those verdicts back) and re-tests the rest; MUTATION_KEEP_KILLS=0 re-tests all.
# Results and how to read them: docs/mutation.md.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${MUTATION_DIR:-/tmp/lookahead-mutation}"
CHILDREN="${MUTATION_CHILDREN:-2}"
LIMIT="${MUTATION_TIMEOUT:-0}"
ALL=(verify mask cache tree kernels loop single proposer budget budget_kernels api batch)

command -v mutmut >/dev/null || { echo "mutmut not found: pip install mutmut" >&2; exit 2; }

# The fast test selection per module: the tests written against that module's behaviour,
# a few seconds to a minute each (pytest arguments, relative to the repository root).
# Each module's file under lookahead/.
path_of() {
  case "$1" in
    verify) echo "verify/rules.py" ;;
    mask | cache | loop | single | proposer | batch) echo "step/$1.py" ;;
    budget) echo "drafts/budget.py" ;;
    budget_kernels) echo "drafts/budget_kernels.py" ;;
    tree) echo "verify/tree.py" ;;
    kernels) echo "drafts/kernels.py" ;;
    api) echo "api.py" ;;
    *) echo "unknown module: $1 (one of: ${ALL[*]})" >&2; return 1 ;;
  esac
}

tests_for() {
  case "$1" in
    verify) echo "tests/unit/test_verify.py tests/unit/test_trie.py tests/unit/test_stopping.py::test_user_criterion_fires_before_the_stop_string tests/contract/test_compat.py::test_return_dict_with_scores_and_logits tests/contract/test_compat.py::test_user_logits_processor tests/contract/test_sampling.py::test_same_seed_same_output_whatever_the_shape" ;;
    mask) echo "tests/unit/test_mask.py tests/unit/test_cache.py tests/contract/test_sliding_window.py tests/contract/test_exact.py::test_left_padding" ;;
    cache) echo "tests/unit/test_mask.py tests/unit/test_cache.py tests/contract/test_sliding_window.py tests/contract/test_batch.py::test_cache_rows_equal_a_fresh_prefill" ;;
    tree) echo "tests/unit/test_trie.py tests/unit/test_mask.py::test_step_mask_equals_the_reference" ;;
    kernels) echo "tests/unit/test_trie.py tests/unit/test_pool.py tests/unit/test_kernels.py tests/unit/test_successors.py::test_successor_table_against_a_dict" ;;
    loop | single | proposer) echo "tests/unit/test_decoder.py tests/contract/test_batch.py::test_batch_with_recycled_guesses_equals_greedy tests/unit/test_compression.py tests/unit/test_window.py tests/contract/test_sliding_window.py::test_steps_longer_than_the_window_equal_greedy tests/unit/test_stopping.py::test_user_criterion_sees_each_token_and_its_scores tests/unit/test_stopping.py::test_eos_list_fires_before_stop_string_and_user_criterion tests/contract/test_exact.py::test_repetitive_prompts_accept_several_tokens_per_forward tests/contract/test_exact.py::test_left_padding tests/contract/test_exact.py::test_long_generation_slides_past_the_window tests/contract/test_compat.py::test_return_dict_with_scores_and_logits tests/contract/test_compat.py::test_streamer_gets_prompt_then_each_final_token_once tests/contract/test_compat.py::test_user_stopping_criteria_stop_mid_block tests/contract/test_compat.py::test_pool_kept_across_requests_helps_the_next_one tests/contract/test_compat.py::test_stats_add_up_over_calls" ;;
    budget | budget_kernels) echo "tests/unit/test_budget.py tests/unit/test_sources.py tests/unit/test_kept_state.py tests/unit/test_compression.py tests/unit/test_vllm_proposer.py" ;;
    api) echo "tests/contract/test_api.py tests/unit/test_stopping.py tests/contract/test_errors.py tests/unit/test_decoder.py::test_output_carries_scores_and_logits_only_when_asked tests/unit/test_decoder.py::test_model_with_use_cache_off_in_its_config_equals_greedy tests/unit/test_decoder.py::test_model_without_logits_to_keep_equals_greedy tests/contract/test_compat.py::test_user_logits_processor tests/contract/test_compat.py::test_stop_strings_with_tokenizer tests/contract/test_compat.py::test_streamer_gets_prompt_then_each_final_token_once tests/contract/test_compat.py::test_return_dict_with_scores_and_logits tests/contract/test_compat.py::test_generation_config_object_and_model_defaults tests/contract/test_compat.py::test_custom_generate_entry_point tests/contract/test_compat.py::test_custom_generate_with_stop_string_criterion tests/contract/test_compat.py::test_stop_strings_from_a_generation_config tests/contract/test_compat.py::test_stop_strings_without_tokenizer_is_a_clear_error tests/contract/test_compat.py::test_pool_kept_across_requests_helps_the_next_one tests/contract/test_compat.py::test_pool_shape_must_match_the_config tests/contract/test_compat.py::test_stats_add_up_over_calls tests/contract/test_sampling.py::test_same_seed_same_output_whatever_the_shape tests/contract/test_sampling.py::test_sampling_options_run_with_stats tests/contract/test_batch.py::test_bad_batches_are_clear_errors tests/contract/test_batch.py::test_finished_rows_leave_the_batch tests/contract/test_batch.py::test_custom_generate_entry_point_takes_a_batch tests/contract/test_batch.py::test_stop_strings_and_user_criteria_per_row" ;;
    batch) echo "tests/contract/test_batch.py::test_batch_equals_generate[llama-sdpa] tests/contract/test_batch.py::test_batch_equals_generate[mistral-eager] tests/contract/test_batch.py::test_batch_equals_generate[gemma2-eager] tests/contract/test_batch.py::test_repetitive_rows_compress tests/contract/test_batch.py::test_finished_rows_leave_the_batch tests/contract/test_batch.py::test_stop_strings_and_user_criteria_per_row tests/contract/test_batch.py::test_custom_generate_entry_point_takes_a_batch tests/contract/test_batch.py::test_sampling_each_row_has_the_models_distribution tests/contract/test_batch.py::test_cache_rows_equal_a_fresh_prefill tests/contract/test_batch.py::test_bad_batches_are_clear_errors tests/contract/test_batch.py::test_kept_state_remembers_each_row_s_real_text tests/contract/test_batch.py::test_finished_rows_feed_pad_runs_while_scores_are_reported tests/contract/test_batch.py::test_every_guess_source_contributes_in_a_batch tests/contract/test_batch.py::test_rows_share_one_pool_and_one_successor_table tests/contract/test_api.py::test_batch_output_and_pool tests/contract/test_api.py::test_the_given_cost_curve_drives_the_budget tests/contract/test_api.py::test_batch_pads_with_the_first_eos_when_there_is_no_pad_id tests/contract/test_api.py::test_sampling_runs_the_processors" ;;
    *) echo "unknown module: $1 (one of: ${ALL[*]})" >&2; return 1 ;;
  esac
}

# Write the copy's [tool.mutmut] section: the repository's settings, this module only, its tests.
configure() {
  local module="$1" dir="$2"
  python - "$dir/pyproject.toml" "lookahead/$(path_of "$module")" $(tests_for "$module") <<'PY'
import json, re, sys, tomllib
path, target, tests = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(path).read()
base = tomllib.loads(text).get("tool", {}).get("mutmut", {})
text = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", text)
cfg = {**base, "source_paths": ["lookahead/"], "only_mutate": [target],
       "pytest_add_cli_args_test_selection": tests}
lines = ["[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in cfg.items()]
open(path, "w").write(text.rstrip() + "\n\n" + "\n".join(lines) + "\n")
PY
}

report() {
  local module="$1"
  mutmut export-cicd-stats >/dev/null
  python - "$module" <<'PY'
import json, sys
s = json.load(open("mutants/mutmut-cicd-stats.json"))
done = s["killed"] + s["timeout"] + s["survived"] + s["suspicious"] + s["segfault"]
rest = s["total"] - done - s["no_tests"] - s["skipped"]
score = 100 * (s["killed"] + s["timeout"] + s["segfault"]) / done if done else 0.0
print(f"{sys.argv[1]}: {s['total']} mutants, {s['killed']} killed, {s['timeout']} timeout, {s['segfault']} crashed, "
      f"{s['survived']} survived, {s['suspicious']} suspicious, {s['no_tests']} no tests, {rest} not run yet "
      f"-> score {score:.1f}% of those run")
PY
  mutmut results | grep -v ": killed$" || true
}

modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=("${ALL[@]}")
for module in "${modules[@]}"; do
  tests_for "$module" >/dev/null
  dir="$WORK/$module"
  mkdir -p "$dir"
  # a fresh copy of the sources, tests and config (mtimes kept, so mutmut sees what changed)
  python - "$ROOT" "$dir" <<'PY'
import shutil, sys
from pathlib import Path
root, dest = Path(sys.argv[1]), Path(sys.argv[2])
skip = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.nbi", "*.nbc", "models")
for name in ("lookahead", "tests"):
    shutil.rmtree(dest / name, ignore_errors=True)
    shutil.copytree(root / name, dest / name, ignore=skip)
shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")
PY
  if [ "$module" = kernels ]; then
    sed -i -E '/^@njit/d' "$dir/lookahead/drafts/kernels.py"
  fi
  configure "$module" "$dir"
  selection="$(tests_for "$module")"
  meta="$dir/mutants/lookahead/$(path_of "$module").meta"
  kept=""
  if [ "${MUTATION_KEEP_KILLS:-1}" = 1 ] && [ -f "$meta" ] && [ -f "$dir/.selection" ] \
     && [ "$(cat "$dir/.selection")" != "$selection" ]; then
    kept="$dir/.verdicts-before.json"
    cp "$meta" "$kept"
  fi
  echo "== $module: mutating lookahead/$(path_of "$module") against: $selection"
  (
    cd "$dir"
    export HYPOTHESIS_PROFILE=mutation OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_DISABLE_JIT=1
    if [ -n "$kept" ]; then
      echo "   the test selection changed: keeping the kills of unchanged functions"
      first="$(python -c 'import json,sys; m=json.load(open(sys.argv[1])); print(next(k for k,v in m["exit_code_by_key"].items() if v in (1,3)))' "$kept")"
      mutmut run --max-children 1 "$first" >/dev/null 2>&1 || true   # resets, maps the new tests
      python - "$kept" "mutants/lookahead/$(path_of "$module").meta" <<'PY'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:])
fn = lambda key: key.rsplit("__mutmut_", 1)[0]
killed = {1, 3, -24, 24, 36, 152, 255, -11, -9}
n = 0
for key, code in old["exit_code_by_key"].items():
    same = old["hash_by_function_name"].get(fn(key)) == new["hash_by_function_name"].get(fn(key))
    if code in killed and same and key in new["exit_code_by_key"] and new["exit_code_by_key"][key] is None:
        new["exit_code_by_key"][key] = code
        n += 1
json.dump(new, open(sys.argv[2], "w"))
print(f"   kept {n} verdicts (killed or timeout, function unchanged)")
PY
    fi
    echo "$selection" > .selection   # mutmut has (or is about to have) the new selection
    args=(run --max-children "$CHILDREN")
    if [ -n "${MUTANTS:-}" ]; then read -ra names <<< "$MUTANTS"; args+=("${names[@]}"); fi
    run=(mutmut "${args[@]}")
    [ "$LIMIT" -gt 0 ] && run=(timeout --foreground -s INT -k 60 "$LIMIT" "${run[@]}")
    # mutmut redraws a spinner with carriage returns: keep its plain lines only
    "${run[@]}" 2>&1 | tr '\r' '\n' | LC_ALL=C.UTF-8 grep -avP '^[\x{2800}-\x{28FF}]' || true
    [ "${PIPESTATUS[0]}" = 0 ] || echo "(mutmut stopped early; rerun to go on)"
    report "$module"
  )
done
