"""The K policy: how many tokens each round drafts, and with which drafter (K = 0: a plain step).

The decoder asks a `Policy` for a `Plan` before every target pass and tells it what happened after.
What a pass costs, which every policy prices from, is `decoding/costs/`.

- `plan.py`: what a policy sees (`RoundContext`) and decides (`Plan`), the `Policy` protocol, and
  `PolicyChoice`, the user's choice of policy (--k).
- `simple_policies.py`: the baselines every tool offers, a fixed K (`FixedK`) and transformers'
  +2/-1 schedule (`HeuristicK`).
- `controller.py`: the cost-aware policy (`AutoK`: `auto`, `auto-chain`) and `make_policy`, which
  turns a `PolicyChoice` into a policy.
- `acceptance.py`: how often the target takes each drafter's tokens, learnt with forgetting.
- `exploration.py`: what keeps the auto policy measuring the choices it would stop making (tree
  rounds, probes of the draft model, copies verified while the cost curve is in doubt).
"""
