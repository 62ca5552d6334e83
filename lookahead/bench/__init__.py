"""The benchmark behind ``lookahead bench`` and ``lookahead sweep`` (see docs/bench.md).

prompts: prompt sets; methods: how each method runs and is measured; probes: forward hooks and
peak memory; runner: the interleaved loop; report: aggregates, table, JSON; sweep: the grid;
plot: figures. The model under test is loaded by ``lookahead.checking.loading``.
"""
