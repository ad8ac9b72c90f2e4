from dataclasses import replace

from controller.simulate import SimSettings, simulate
from controller.tune import plot_tradeoff, tune
from tests.test_simulate import Profile, daily


class Counting(Profile):
    fits_made = 0

    def fit(self, history):
        Counting.fits_made += 1
        return super().fit(history)


def test_sweep_fits_once_per_history_and_matches_separate_simulations():
    d = daily()
    Counting.fits_made = 0
    t = tune(d, Counting, target_quantiles=(0.1, 0.5), lead_times_seconds=(0.0, 900.0), headroom_quantiles=(0.99,),
             shortage_objective=0.01, days=1)
    # one refit per evaluated hour and one per hour the buffer replay plays (its last day before them), not one
    # per setting or per buffer factor tried
    assert len(t.table) == 4 and Counting.fits_made == 24 + 24
    row = t.table.iloc[3]
    alone = simulate(d, days=1, make_forecaster=Profile,
                     settings=replace(SimSettings(), target_quantile=row.target_quantile,
                                      lead_time_seconds=row.lead_time_seconds, headroom_quantile=row.headroom_quantile))
    assert (row.utilization, row.inference_shortage) == (alone.utilization, alone.inference_shortage)


def test_tune_recommends_highest_utilization_meeting_objective(tmp_path):
    d = daily()
    t = tune(d, Profile, target_quantiles=(0.5, 0.9), lead_times_seconds=(0.0, 900.0), headroom_quantiles=(0.99,),
             shortage_objective=0.01, days=1)
    assert len(t.table) == 4
    ok = t.table[t.table.inference_shortage <= 0.01]
    if t.recommended is None:
        assert ok.empty
    else:
        assert ok.utilization.max() == t.table.set_index(["target_quantile", "lead_time_seconds"]).loc[
            (t.recommended["target_quantile"], t.recommended["lead_time_seconds"]), "utilization"].max()
    png = plot_tradeoff(t, str(tmp_path / "tradeoff.png"))
    assert open(png, "rb").read(4) == b"\x89PNG"
