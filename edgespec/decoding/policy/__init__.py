"""The K policy: how many tokens each round drafts, and with which drafter (K = 0: a plain step).

The decoder asks a `Policy` for a `Plan` before every target pass and tells it what happened after.

- `plan.py`: what a policy sees (`RoundContext`) and decides (`Plan`), the `Policy` protocol, and
  `PolicyChoice`, the user's choice of policy (--k).
- `simple_policies.py`: the baselines every tool offers, a fixed K (`FixedK`) and transformers'
  +2/-1 schedule (`HeuristicK`).
- `controller.py`: the cost-aware policy (`AutoK`: `auto`, `auto-chain`) and `make_policy`, which
  turns a `PolicyChoice` into a policy.
- `costs.py`: what a round costs (`CostModel`: the target's verify curve and the draft step,
  calibrated and then learnt from every pass) and the K that maximises tokens per second.
- `steady_curve.py`, `steady_costs.py`: the curve fixed between calibrations, and the costs that
  price a call's passes from it alone (the same passes for the same request).
- `measuring.py`: how a calibration times the models: which passes, in which order, when it stops.
- `plausible.py`: whether measured pass timings could be the machine's, judged against each other.
- `quiet_cost.py`: what an operation costs on a quiet machine, kept between runs.
- `acceptance.py`: how often the target takes each drafter's tokens, learnt with forgetting.
- `exploration.py`: what keeps the auto policy measuring the choices it would stop making (tree
  rounds, probes of the draft model, copies verified while the cost curve is in doubt).
"""
