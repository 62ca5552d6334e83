"""``lookahead sweep``: lookahead over a window x ngram x guesses grid against greedy on the same
prompts; prints the best exact setting and draws a heatmap of speed-up."""

from __future__ import annotations

import lookahead.cli.bench as bench
import lookahead.cli.options as options
from lookahead.bench import methods, report
from lookahead.bench import sweep as grids
from lookahead.cli.options import UsageError

DEFAULT_LIMIT = 6
DEFAULT_MAX_NEW = 64


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="grid-search the lookahead shape (window x ngram x guesses)",
        description="Run lookahead over a window x ngram x guesses grid against greedy on the same prompts; "
        "print the best exact setting and write a heatmap of speed-up.",
    )
    bench.harness_options(p, DEFAULT_LIMIT, DEFAULT_MAX_NEW)
    g = p.add_argument_group("lookahead grid")
    g.add_argument(
        "--method", default="lookahead", choices=methods.ENGINE_METHODS, help="engine method (default: %(default)s)"
    )
    g.add_argument(
        "--window", default=None, help=f"values, e.g. 1,2,4,8 or 2-6 (default: {_csv(grids.DEFAULT_WINDOWS)})"
    )
    g.add_argument("--ngram", default=None, help=f"values (default: {_csv(grids.DEFAULT_NGRAMS)})")
    g.add_argument("--guesses", default=None, help=f"values (default: {_csv(grids.DEFAULT_GUESSES)})")
    options.set_option(g)
    p.add_argument(
        "--plot", metavar="PATH.png", default="lookahead-sweep.png", help="heatmap path (default: %(default)s)"
    )
    p.set_defaults(func=run, validate=options.validate)


def _csv(values) -> str:
    return ",".join(str(v) for v in values)


def run(args) -> int:
    if not methods.available(args.method):
        raise methods.MethodUnavailable(f"method {args.method} is not available here")
    grid = [
        grids.parse_grid(args.window, grids.DEFAULT_WINDOWS, "window"),
        grids.parse_grid(args.ngram, grids.DEFAULT_NGRAMS, "ngram"),
        grids.parse_grid(args.guesses, grids.DEFAULT_GUESSES, "guesses"),
    ]
    extra = options.config_fields(args, names=())
    model, chosen, encoded, settings = bench.setup(args)
    settings.config_fields = extra
    options.make_config({"method": args.method, **extra})  # bad --set values fail before measuring
    variants = grids.grid_variants(settings, *grid, method=args.method)
    if len(variants) < 2:
        raise UsageError("no valid lookahead shape in the grid")
    records, labels, skipped, _ = bench.measure(args, model, chosen, encoded, variants)
    variants = [v for v in variants if v.label in labels]
    if len(variants) < 2:
        raise methods.MethodUnavailable(f"{args.method} could not run any grid point: {next(iter(skipped.values()))}")
    axes = dict(zip(options.SHAPE_FIELDS, (list(g) for g in grid)))
    config = bench.run_config(args, model, chosen, encoded, labels, {"method": args.method, "grid": axes, **extra})
    doc = report.document(config, records, labels, methods.BASELINE, exactness=not args.sample)
    cells = grids.cells(doc, variants)
    out = options.human(args)
    print(report.headline(doc["config"]), file=out)
    print(grids.ranking(cells), file=out)
    top = grids.best(cells)
    if top:
        print(
            f"best: --window {top['window']} --ngram {top['ngram']} --guesses {top['guesses']} "
            f"({top['speedup']:.2f}x vs greedy, {top['tokens_per_forward']:.2f} tokens/forward)",
            file=out,
        )
    if args.json:
        options.write_json({**doc, "grid": cells, "best": top}, args.json, out)
    if args.plot:
        from lookahead.bench import plot

        title = f"{config['model_name']} · {config['dtype']} · {args.prompts}"
        bench.plot(plot.sweep_heatmap, cells, args.plot, out, title=title)
    return bench.verdict(args, doc)
