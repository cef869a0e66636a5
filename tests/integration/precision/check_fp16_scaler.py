# mixed_precision.sh: METRICS: the fp16 loss scale per step follows DeepSpeed's
#   DynamicLossScaler; skipped steps, lr
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = {r["step"]: r for r in recs if "loss" in r and "skipped" in r}
assert sorted(steps) == list(range(1, 13)), sorted(steps)
# DeepSpeed's DynamicLossScaler.update_scale (delayed_shift = hysteresis, scale_factor 2,
# consecutive_hysteresis False), fed the overflow of each step
scale, it, last, hyst = 2.0 ** 8, 0, -1, 2
want = {}
for step in range(1, 13):
    want[step] = scale
    overflow = step in (3, 5)
    if overflow:
        if hyst == 1:
            scale = max(scale / 2, 1.0)
        else:
            hyst -= 1
        last = it
    elif (it - last) % 4 == 0:
        hyst = 2
        scale *= 2
    it += 1
got = {s: r["loss_scale"] for s, r in steps.items()}
assert got == want, f"loss scale per step: got {got}, want {want}"
assert [s for s, r in steps.items() if r["skipped"]] == [3, 5], "skipped steps"
assert steps[3]["grad_norm"] is None and steps[4]["grad_norm"] is not None
assert steps[12]["skipped_steps"] == 2
# the schedule counts steps taken: step 4 runs at step 3's lr, step 6 at step 5's, and the
# unskipped neighbours differ (the cosine moves every step after the 2 warm-up steps)
assert steps[4]["lr"] == steps[3]["lr"] and steps[6]["lr"] == steps[5]["lr"], "lr advanced"
assert steps[5]["lr"] != steps[4]["lr"] and steps[7]["lr"] != steps[6]["lr"]
print("fp16 scaler: skipped", [3, 5], "scales", sorted(set(want.values())), "as DeepSpeed's")
