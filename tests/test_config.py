import pytest

from infolm.config import load_config
from infolm.errors import InfolmError
from tests.conftest import ROOT


def test_overrides_beat_yaml_which_beats_defaults():
    config = load_config(ROOT / "configs/tiny.yaml", ["optim.lr=3", "objective.ar.weight=2.5", "model.hidden=8"])
    assert config.optim.lr == 3.0 and isinstance(config.optim.lr, float)
    assert config.objective["ar"] == {"weight": 2.5}
    assert config.objective["mle"] == {"weight": 1.0}
    assert config.model["hidden"] == 8
    assert config.optim.momentum == 0.0  # dataclass default


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.max_stepz=3", "unknown config key config.train.max_stepz"),
        ("optim.lr=fast", "optim.lr must be of type float"),
        ("data.batch_size=0", "data.batch_size must be positive"),
        ("train.precision=fp8", "train.precision must be one of"),
        ("optim.name=lamb", "optim.name must be one of"),
        ("nonsense", "is not of the form key=value"),
    ],
)
def test_bad_values_fail_with_one_clear_message(override, message):
    with pytest.raises(InfolmError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_config(ROOT / "configs/tiny.yaml", [override])


def test_missing_file():
    with pytest.raises(InfolmError, match="config file not found"):
        load_config("does/not/exist.yaml")


def test_tilde_removes_a_key_of_the_file(tmp_path):
    """Hydra's ``~key``: the term disappears from the objective; settings of the others are kept."""
    path = tmp_path / "two.yaml"
    path.write_text("objective:\n  mle: {weight: 1.0}\n  ar: {weight: 2.0}\noptim:\n  lr: 3.0\n")
    config = load_config(path, ["~objective.mle"])
    assert config.objective == {"ar": {"weight": 2.0}}
    assert load_config(path, ["~optim.lr"]).optim.lr == 20.0  # back to the dataclass default
    assert load_config(path, ["~objective.mle", "objective.mle.weight=0.5"]).objective["mle"] == {"weight": 0.5}
    assert load_config(path).objective.keys() == {"mle", "ar"}  # the file itself is untouched
    for bad, message in (("~objective.nope", "has no key objective.nope"), ("~optim.lr=3", "dotted name alone")):
        with pytest.raises(InfolmError, match=message):
            load_config(path, [bad])


def test_a_run_from_before_a_setting_existed_resumes_with_its_default(tmp_path):
    import yaml

    from infolm.build import check_run_dir
    from infolm.config import load_config, to_dict

    config = load_config(ROOT / "configs/tiny.yaml", [f"run.dir={tmp_path}"])
    saved = to_dict(config)
    del saved["data"]["extra_tokens"]  # a run written before data.extra_tokens existed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    check_run_dir(config, tmp_path)  # the new setting at its default: the same run
    changed = load_config(ROOT / "configs/tiny.yaml", [f"run.dir={tmp_path}", "data.extra_tokens=[<x>]"])
    with pytest.raises(InfolmError, match="data.extra_tokens"):
        check_run_dir(changed, tmp_path)


def test_a_mapping_override_that_merges_into_the_file_gets_a_note():
    """``objective={noising: ...}`` keeps the file's ``mle`` term; the note names it and how to drop it."""
    from infolm.config import merge_notes

    path = ROOT / "configs/ptb/imm-table2-cpu-continue.yaml"
    notes = merge_notes(path, ["objective={noising: {gamma0: 0.2}}"])
    assert notes == [
        "objective={...} merges into the config's objective; kept from the file: mle (~objective.mle drops it)"
    ]
    assert merge_notes(path, ["~objective.mle", "objective={noising: {gamma0: 0.2}}"]) == []
    assert merge_notes(path, ["objective.noising.gamma0=0.2", "optim.lr=1"]) == []  # dotted keys: nothing to say
    assert merge_notes(path, ["objective={mle: {weight: 2.0}}"]) == []  # names every term the file has
