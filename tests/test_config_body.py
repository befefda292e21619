"""POST /api/config/validate's body: a top-level key other than "config" and "model" was
ignored (``{"confg": {"lr": 5}}`` answered ok with the defaults); each is now an error naming
the key, with the known key it is closest to, or, for a setting's name, where it belongs."""

from __future__ import annotations

import pytest

TAKES = 'it takes "config" and "model"'


@pytest.mark.parametrize("body,errors", [
    # a typo of "config": its settings were dropped, the defaults "ok"
    ({"confg": {"lr": 5}}, [["confg", f'unknown key of the body (did you mean "config"?); '
                                      f"{TAKES}"]]),
    ({"config": {}, "modle": "seednet"},
     [["modle", f'unknown key of the body (did you mean "model"?); {TAKES}']]),
    # a flat config sent without "config": each setting says where it belongs
    ({"lr": 0.1, "epochs": 3},
     [["lr", 'unknown key of the body; lr is a setting: send it inside "config" '
             f'({{"config": {{"lr": ...}}}}); {TAKES}'],
      ["epochs", 'unknown key of the body; epochs is a setting: send it inside "config" '
                 f'({{"config": {{"epochs": ...}}}}); {TAKES}']]),
    # inherited names are keys like any other; nothing close: no suggestion
    ({"config": {}, "__proto__": 1, "constructor": 2},
     [["__proto__", f"unknown key of the body; {TAKES}"],
      ["constructor", f"unknown key of the body; {TAKES}"]]),
    ({"config": {}, "x\u202ey": 1}, [["x\\u202ey", f"unknown key of the body; {TAKES}"]]),
    ({"config": {}, "k" * 100: 1},
     [["'" + "k" * 40 + "'... (100 characters)", f"unknown key of the body; {TAKES}"]]),
    ({"config": {}, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5},
     [["a", f"unknown key of the body; {TAKES}"], ["b", f"unknown key of the body; {TAKES}"],
      ["c", f"unknown key of the body; {TAKES}"], ["body", "2 more unknown keys (not listed)"]]),
    # with the config's own errors, after the unknown keys
    ({"config": {"seed": 1.5}, "cfg": 1},
     [["cfg", f'unknown key of the body (did you mean "config"?); {TAKES}'],
      ["seed", "must be an integer in [0, 4,294,967,295], got 1.5"]]),
])
def test_unknown_top_level_keys_are_errors(config_client, body, errors):
    r = config_client.post("/api/config/validate", json=body)
    assert (r.status_code, r.json()) == (200, {"ok": False, "errors": errors})


def test_known_keys_still_ok(config_client):
    r = config_client.post("/api/config/validate",
                           json={"config": {"lr": 0.01}, "model": "seednet"})
    assert r.status_code == 200 and r.json()["ok"] is True, r.json()
    assert r.json()["config"]["lr"] == 0.01
    assert config_client.post("/api/config/validate", json={}).json()["ok"] is True
