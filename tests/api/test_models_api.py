"""The models through the real app and the CLI: GET /v1/models side by side, admin-only
changes, a refused promotion answered 409 with its reasons, a forced one audited, a rollback;
and `gpuhealth model` and `gpuhealth labels` on the same SQLite file, followed by the service."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collectors.labels import load_labels
from service.api.app import create_app
from service.commands.cli import main
from service.settings import SHIPPED_MODEL, Settings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock


class Svc:
    def __init__(self, client: TestClient, app: Any, clock: ManualClock, fleet: Fleet) -> None:
        self.client, self.app, self.clock, self.fleet = client, app, clock, fleet
        auth = app.state.gpuhealth_auth
        self.tokens = {s: auth.tokens.create(s, s, clock())[1] for s in ("read", "admin",
                                                                          "operate")}

    def round(self) -> None:
        st = self.app.state.gpuhealth
        st.scheduler.collect_once("fleet")
        st.scheduler.score_once()
        self.clock.now += STEP

    def call(self, method: str, url: str, scope: str = "admin", status: int = 200,
             **kw: Any) -> Any:
        r = self.client.request(method, url, headers={
            "Authorization": f"Bearer {self.tokens[scope]}"}, **kw)
        assert r.status_code == status, r.text
        return r.json()


@pytest.fixture
def svc(settings: Settings) -> Iterator[Svc]:
    fleet, clock = Fleet({"n001": 4, "n002": 4}), ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        s = Svc(client, app, clock, fleet)
        s.round()
        yield s


def test_models_side_by_side_promote_refused_forced_and_rolled_back(svc: Svc,
                                                                    tmp_path: Path) -> None:
    challenger = tmp_path / "challenger"
    shutil.copytree(SHIPPED_MODEL, challenger)
    got = svc.call("GET", "/v1/models", "read")
    assert got["active"]["loaded"] and got["challenger"] is None
    # What the fleet has taught: nothing yet, and why the loop does not run here.
    learning = got["learning"]
    assert not learning["enabled"] and "no InfluxDB" in learning["why"]
    assert learning["labels_per_mode"] == {} and learning["min_labels_per_mode"] == 10
    assert learning["waiting"].startswith("no failure mode has 10 labels")
    svc.call("POST", "/v1/models/challenger", "operate", 403, json={"path": str(challenger)})
    bad = svc.call("POST", "/v1/models/challenger", json={"path": str(tmp_path / "none")},
                   status=422)
    assert "none" in bad["detail"]
    svc.call("POST", "/v1/models/challenger", json={"path": str(challenger)})
    svc.fleet.set("n001:gpu2", "ecc_dbe_volatile", 1)
    for _ in range(4):
        svc.round()
    got = svc.call("GET", "/v1/models", "read")
    assert got["challenger"]["running"] and got["challenger"]["error"] == ""
    assert got["learning"]["labels_per_mode"] == {"M1_hbm": 1}  # the DBE's auto-label
    assert got["run"]["outcome"] == "running" and got["run"]["started_at"].endswith("Z")
    assert set(got["scores"]) == {"active:fused", "active:model", "challenger:fused",
                                  "challenger:model"}
    assert got["scores"]["challenger:fused"]["watch"]["failures"] == 1
    assert not got["judgement"]["better"]
    refused = svc.call("POST", "/v1/models/promote", json={}, status=409)
    assert "less than the 7 agreed" in refused["detail"]
    svc.call("POST", "/v1/models/promote", json={"force": True, "reason": "canary"})
    got = svc.call("GET", "/v1/models", "read")
    assert got["active"]["path"] == str(challenger.resolve()) and got["active"]["loaded"]
    assert got["audit"][0]["action"] == "promote" and got["audit"][0]["forced"]
    assert got["audit"][0]["actor"] == "admin"
    svc.call("POST", "/v1/models/rollback", json={"reason": "back"})
    got = svc.call("GET", "/v1/models", "read")
    assert got["active"]["path"] == str(SHIPPED_MODEL)
    assert [a["action"] for a in got["audit"]] == ["rollback", "promote", "shadow"]
    svc.call("DELETE", "/v1/models/challenger", status=409)  # nothing in shadow any more


def test_anonymous_readers_see_no_artifact_paths_nor_token_names(svc: Svc,
                                                                 tmp_path: Path) -> None:
    challenger = tmp_path / "challenger-secret-dir"
    shutil.copytree(SHIPPED_MODEL, challenger)
    svc.call("POST", "/v1/models/challenger", json={"path": str(challenger)})
    svc.round()
    r = svc.client.get("/v1/models")  # no token: reads are open on this service
    assert r.status_code == 200, r.text
    text = r.text
    for secret in (str(challenger), "challenger-secret-dir", str(SHIPPED_MODEL), '"admin"'):
        assert secret not in text, secret
    got = r.json()
    assert got["challenger"]["path"] is None and got["challenger"]["added_by"] is None
    assert got["audit"][0]["action"] == "shadow" and got["audit"][0]["actor"] is None
    assert got["active"]["version"] and got["challenger"]["version"]  # what a reader needs
    full = svc.call("GET", "/v1/models", "read")  # a token holder reads it all
    assert full["challenger"]["path"] == str(challenger.resolve())
    assert full["audit"][0]["actor"] == "admin"


def test_the_cli_changes_what_the_running_service_scores_with(svc: Svc, settings: Settings,
                                                              tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    challenger = tmp_path / "challenger"
    shutil.copytree(SHIPPED_MODEL, challenger)
    cfg = tmp_path / "gpuhealth.yaml"
    cfg.write_text(f"storage:\n  data_dir: {settings.storage.data_dir}\n")
    assert main(["model", "shadow", str(challenger), "--config", str(cfg)]) == 0
    assert main(["model", "promote", "--config", str(cfg)]) == 2
    assert "less than the 7 agreed" in capsys.readouterr().err
    assert main(["model", "compare", "--json", "--config", str(cfg)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["challenger"]["path"] == str(challenger.resolve())
    assert main(["model", "promote", "--force", "--reason", "cli", "--config", str(cfg)]) == 0
    st = svc.app.state.gpuhealth
    st.pipeline.roles.check(force=True)  # the service's next model check
    assert st.pipeline.model.path == challenger.resolve()
    assert main(["model", "rollback", "--config", str(cfg)]) == 0
    st.pipeline.roles.check(force=True)
    assert st.pipeline.model.path == SHIPPED_MODEL
    assert main(["model", "list", "--config", str(cfg)]) == 0
    listed = capsys.readouterr().out
    assert "promote" in listed and "(forced): cli" in listed


def test_labels_export_writes_a_labels_file_training_reads(svc: Svc, settings: Settings,
                                                           tmp_path: Path) -> None:
    svc.fleet.set("n002:gpu1", "ecc_dbe_volatile", 1)
    for _ in range(3):
        svc.round()
    cfg = tmp_path / "gpuhealth.yaml"
    cfg.write_text(f"storage:\n  data_dir: {settings.storage.data_dir}\n")
    out = tmp_path / "labels.jsonl"
    assert main(["labels", "export", "--out", str(out), "--config", str(cfg)]) == 0
    (label,) = load_labels(out)
    assert (label.kind, label.entity, str(label.mode)) == ("failure", "n002:gpu1", "M1_hbm")
    assert label.extra["source"] == "rule:dbe" and label.extra["alert_id"] >= 1
    assert main(["labels", "export", "--out", str(out), "--since", "bogus",
                 "--config", str(cfg)]) == 2
