"""What a pass costs on this machine: the cost curve, through its life, and what prices from it.

- `model.py`: the curve (`CostModel`): seconds per target pass by tokens verified, per draft step
  and per token read, live and quiet; and the K that maximises tokens per second under it.
- `interpolation.py`: the price of a size between and beyond the timed ones.
- `quiet.py`: what one operation costs on a quiet machine, from recent sessions' timings.
- `steady_curve.py`: the quiet curve as the last calibration left it (`SteadyCurve`).
- `steady.py`: costs that price a call's passes from the steady curve alone (`SteadyCosts`).
- `measuring.py`: how a calibration times the models: which passes, in which order, when it stops.
- `plausible.py`: whether measured pass timings could be the machine's, judged against each other.
- `keeper.py`: the curve's life for one engine: restored or measured, refined, saved, measured
  again when in doubt (`CurveKeeper`).
- `saved.py`: the curve on disk (`calibration.json`) and its version and format.
- `thread_count.py`: the CPU thread count, measured per pass against the curve's shape.
- `call_prediction.py`: the seconds of a typical call on a curve, that layouts are ranked by.
"""
