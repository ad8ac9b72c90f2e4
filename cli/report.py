"""`headroom report`: a simulation of DEMAND under every policy, as one HTML page with plots."""
from __future__ import annotations

import json

from cli.outputs import check_output_dir, check_output_files, command_inputs, make_output_dir, writing
from cli.progress import stage_printer
from cli.simulate import every_policy, refuse_flags_the_file_holds, whatif
from cli.sources import history_name
from controller.simulate import REFERENCES, write_timeline
from dashboards.report import (
    POLICY_NOTES,
    REPORT_FILES,
    compare_policies,
    comparison_table,
    format_table,
    missing_steps,
    page_notes,
    render_report,
    timeline_of,
)


def cmd_report(cfg, args) -> int:
    """`headroom report DEMAND [--out DIR] [--policy P] [--json] ...` (simulate's options).

    --policy is the policy whose timeline is plotted (and written to --timeline); the table always compares all
    of them."""
    refuse_flags_the_file_holds(cfg, args)
    inputs = command_inputs(cfg, args)
    check_output_files([(args.timeline, "--timeline")], inputs)
    check_output_dir(args.out, "--out", REPORT_FILES, [*inputs, (args.timeline, "--timeline")])
    say = stage_printer("report", quiet=args.json)
    w = whatif(cfg)
    out = make_output_dir(args.out, "--out")  # once the inputs are good: a refused request leaves no empty folder
    specs, tuned = every_policy(cfg, w, progress=say)
    say(f"simulating {history_name(cfg)} under {len(specs)} policies")
    results = compare_policies(w.scenario, specs, timeline_policy=cfg.simulate.policy, progress=say)
    c = cfg.simulate
    f = specs["forecast"]
    facts = {"demand trace": history_name(cfg), "cluster": f"{c.gpus} GPUs",
             # the rate every policy ran with, and where it came from (a policy file's own, else the flags')
             "scaling": f"one GPU serves {f.capacity.demand_per_gpu:.4g} of the trace's demand ("
                        + (f"spec.capacity.demandPerGpu of {c.policy_file}" if c.policy_file else "--per-gpu"
                           if c.per_gpu else f"the 99.9th percentile of demand = {c.peak_gpus:g} GPUs") + ")",
             "simulated": f"last {c.days:g} days (everything before is history)",
             # with what the job trace left out, which no figure counts (said on stderr as it was read)
             "training": f"job trace {c.jobs}" + "".join(f"; {note}" for note in w.notes) if c.jobs
             else "saturated backlog",
             "objective": f"shortage <= {f.objective.max_shortage:.3%}, "
                          f"short steps <= {f.objective.max_short_steps:.2%}",
             "forecast policy": f"target q{f.target_quantile:g}, warm buffer {f.warm_buffer:g}, scale-in delay "
                                f"{f.scale_in_delay}, lead {f.lead_time}, headroom q{f.headroom_quantile:g}, hours "
                                f"of day on {f.timezone}'s clock"
                                + (f" ({tuned.reason})" if tuned is not None else f" (from {c.policy_file})")}
    plotted = cfg.simulate.policy
    if plotted != "forecast":  # the policy the plots follow, with the margin it ran with
        facts["plotted policy"] = f"{plotted}: {POLICY_NOTES[plotted]}" + (
            "" if plotted in REFERENCES else f" (marginGpus {specs[plotted].margin_gpus})")
    missing = missing_steps(w.scenario)
    with writing("--out", args.out):
        path = render_report(out, results, cfg.simulate.policy, c.gpus, facts, tuned, missing=missing)
    if args.timeline:
        with writing("--timeline", args.timeline):
            written = write_timeline(timeline_of(results[cfg.simulate.policy]), args.timeline)
        say(f"timeline: {written}")
    # what the table leaves out (as simulate says it): said on stderr, and in the JSON, which has no progress lines
    notes = page_notes(results[cfg.simulate.policy], c.gpus, missing)
    for note in notes:
        say(f"note: {note}")
    table = comparison_table(results)
    if args.json:  # with what the job trace left out, said on stderr as it was read
        print(json.dumps({"report": str(path.resolve()), "policies": table.to_dict(orient="index"),
                          "notes": [*w.notes, *notes]}, default=str))
        return 0
    print(format_table(table))
    print(f"report: {path.resolve()} (open it with: xdg-open {path.resolve()})")
    return 0
