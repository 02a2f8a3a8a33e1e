"""The shadow judges the models' own opinions: a finding fusion counts for nothing in service
(advisory: the model's window is not calibrated for its mode) counts in the shadow's streams, for
the active model and the challenger alike; otherwise every stream with a model in it would read
as the rules and a promotion would compare two copies of the rules (issue 34)."""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.fusion import fuse
from service.learning.shadow import _counted


def test_an_advisory_opinion_counts_in_the_shadow_and_nowhere_else() -> None:
    adv = Finding("lstm_M2_gpu_hard", Scope.GPU, np.array([0.95, 0.0], np.float32),
                  np.zeros(2), 0.0, "model", source="model", mode="M2_gpu_hard", advisory=True)
    sizes = {Scope.GPU: 2}
    assert fuse([adv], sizes)[Scope.GPU].risk[0] == 0.0  # in service: the rules' timing stands
    judged = _counted(adv)
    assert not judged.advisory and adv.advisory  # the service's finding is left as it was
    assert fuse([judged], sizes)[Scope.GPU].risk[0] == np.float32(0.95)
    rule = Finding("dbe", Scope.GPU, np.array([1.0, 0.0], np.float32), np.zeros(2), 1.0, "dbe")
    assert _counted(rule) is rule
