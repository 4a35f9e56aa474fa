"""Your own pairs in the feature store: Pair validation, FeatureStore.create/add, named accessors, failed adds.

``store.add`` on pairs equal to recognition cases' records must store the same arrays as ``extract`` of
those cases (both in one store, compared dataset by dataset), and a failed add (a bad pair, an exception
or an interruption while encoding or assembling) must leave the store file byte for byte as it was, with
no partial group, no ``.parts`` folder and no temporary file.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from conftest import recognition_cases
import kvprobe.extract.pairs as pairs_module
import kvprobe.extract.pipeline as pipeline
from kvprobe.extract import FeatureStore, Pair, PairError, StoreError, extract
from kvprobe.prompts import SpanError
from kvprobe.studies.recognition.edits import record_edit

pytestmark = pytest.mark.usefixtures("one_thread")


def as_pairs(cases) -> list[Pair]:
    return [Pair(c.a_text, c.b_text, c.labels["replacement"], group=c.group, split=c.split) for c in cases]


def few_pairs(n: int = 6) -> list[Pair]:
    out = []
    for i in range(n):
        a = f"Team {i} meets in room {10 + i}."
        out.append(Pair(a, f"Update: team {i} now meets in room {20 + i}.", i % 2, split=("fit", "eval")[i % 2]))
    return out


def leftovers(path) -> list[str]:
    """Files beside the store that a finished or failed add must not leave (parts folders, temporary files)."""
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


# ----------------------------------------------------------------------------- Pair


@pytest.mark.parametrize("kwargs, message", [
    (dict(a="", b="B.", label=1), "Pair.a is empty"),
    (dict(a="A.", b="  \n", label=1), "Pair.b is empty"),
    (dict(a=3, b="B.", label=1), "Pair.a must be a str"),
    (dict(a="A.", b="B.", label=2), "Pair.label must be 0 or 1"),
    (dict(a="A.", b="B.", label=-1), "Pair.label must be 0 or 1"),
    (dict(a="A.", b="B.", label=0.5), "Pair.label must be 0 or 1"),
    (dict(a="A.", b="B.", label="1"), "Pair.label must be 0 or 1"),
    (dict(a="A.", b="B.", label=1, group=""), "Pair.group must be a non-empty str"),
    (dict(a="A.", b="B.", label=1, split=7), "Pair.split must be a non-empty str"),
])
def test_a_bad_pair_is_refused_by_name_when_built(kwargs, message):
    with pytest.raises(PairError, match=message):
        Pair(**kwargs)


def test_pair_labels_are_ints_and_bools_are_accepted():
    assert Pair("A.", "B.", True).label == 1 and type(Pair("A.", "B.", np.int8(0)).label) is int
    assert Pair("A.", "B.", np.bool_(True)).label == 1


# ----------------------------------------------------------------------------- store.add


def test_add_stores_the_arrays_extract_stores_for_the_same_records(llama, tmp_path):
    cases = recognition_cases()
    path = extract(llama, "records", cases, tmp_path / "s.h5", batch_size=8, progress=False)
    with FeatureStore(path) as store:
        g = store.add(llama, as_pairs(cases), name="mine", batch_size=8)
        assert g.name == "tiny-llama/mine" and len(g) == len(cases)
    with h5py.File(path, "r") as f:
        ref, got = f["tiny-llama/records"], f["tiny-llama/mine"]
        names: list[str] = []
        ref["records"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert len(names) > 20
        for name in names:  # every record table: pooled K/V/H, token-level K, ids, positions, spans, edits
            a, b = ref["records"][name], got["records"][name]
            assert a.dtype == b.dtype and np.array_equal(a[()], b[()]), name
        for name in ("record_a", "record_b", "record_ab", "labels/replacement", "group", "split"):
            assert np.array_equal(ref["cases"][name][()], got["cases"][name][()]), name
        for attr in ("weight_hash", "tokenizer_sha256", "layers", "rope", "key_rope", "kv_layers", "edit"):
            assert ref.attrs[attr] == got.attrs[attr], attr


def test_named_accessors_give_one_pooled_row_per_pair(llama, tmp_path):
    pairs = few_pairs()
    with FeatureStore.create(tmp_path / "s.h5") as store:
        g = store.add(llama, pairs, name="rooms", dtype="float32")
        assert store["rooms"].name == "tiny-llama/rooms" and "tiny-llama/rooms" in store
        cases = g.cases()
        assert np.array_equal(g.keys(2), g.pooled("K", 2, cases["record_ab"]))
        assert np.array_equal(g.values(-1, record="a"), g.pooled("V", 3, cases["record_a"]))
        assert np.array_equal(g.hidden(0, record="b"), g.pooled("H", 0, cases["record_b"]))
        assert g.keys(0).shape == (6, 2, 16) and g.hidden(3).shape == (6, 64)
        # The pooled row is the mean of the record's own token rows (keys as cached).
        tokens = g.tokens("K", 1, int(cases["record_a"][3]))
        assert np.allclose(tokens.mean(axis=1), g.keys(1, record="a")[3], atol=1e-6)
        assert g.labels.tolist() == [p.label for p in pairs]
        assert g.splits.tolist() == ["fit", "eval"] * 3
        assert g.groups.tolist() == [f"pair-{i:06d}" for i in range(6)]  # no group: each pair its own
        p = g.provenance
        assert p["model"] == "tiny-llama" and p["weight_hash"] == llama.weight_hash
        assert p["config"]["dataset"] == "rooms" and p["dataset_info"]["n_pairs"] == 6 and p["edit"] is None
        row = p(int(cases["record_ab"][0]))  # a record's row provenance (the former g.provenance(record))
        assert row["span"] == "B" and row["edits"] == []
        with pytest.raises(StoreError, match="no keys of layer 4"):
            g.keys(4)
        with pytest.raises(StoreError, match="record 'c'"):
            g.values(0, record="c")


def test_an_edited_add_holds_b_after_a_only(llama, tmp_path):
    pairs = few_pairs(4)
    with FeatureStore.create(tmp_path / "s.h5") as store:
        store.add(llama, pairs, name="rooms")
        edited = store.add(llama, pairs, name="rooms", edit=record_edit("compact"))
        assert edited.name == "tiny-llama/rooms@compact" and edited.edit["action"] == "re-rotated"
        assert list(store.edited("tiny-llama/rooms")) == ["compact"]
        assert edited.keys(1).shape == (4, 2, 16) and edited.labels.tolist() == [0, 1, 0, 1]
        with pytest.raises(StoreError, match="edited group"):
            edited.keys(1, record="a")
        with pytest.raises(StoreError, match="no hidden states"):
            edited.hidden(1)


def test_create_open_and_refusals_before_a_forward(llama, tmp_path, monkeypatch):
    path = tmp_path / "s.h5"
    with pytest.raises(StoreError, match="no feature store.*FeatureStore.create"):
        FeatureStore(path)
    store = FeatureStore.create(path)
    assert store.groups() == [] and leftovers(path) == []
    with pytest.raises(StoreError, match="already exists"):
        FeatureStore.create(path)
    FeatureStore.create(path, exist_ok=True).close()

    def no_forward(*args, **kwargs):
        raise AssertionError("encoded before refusing")

    monkeypatch.setattr(pipeline, "encode", no_forward)
    with pytest.raises(StoreError, match="group name 'a/b'"):
        store.add(llama, few_pairs(), name="a/b")
    with pytest.raises(PairError, match="no pairs"):
        store.add(llama, [], name="x")
    with pytest.raises(PairError, match="pairs must be a list of kvprobe.extract.Pair, not a Pair"):
        store.add(llama, few_pairs(1)[0], name="x")
    with pytest.raises(PairError, match="pair 1 is a tuple"):
        store.add(llama, [few_pairs(1)[0], ("A.", "B.", 1)], name="x")
    with pytest.raises(StoreError, match="drop H"):
        store.add(llama, few_pairs(), name="x", edit=record_edit("compact"), token_level=("K", "H"))
    store.close()
    assert leftovers(path) == []


def test_a_record_without_a_span_of_its_own_is_refused_before_a_forward(llama, tmp_path, monkeypatch):
    real = pairs_module.char_span_to_tokens

    def straddles(offsets, text, start, end, **kwargs):
        if "\n" in text and text.endswith("room 23."):  # pair 3's B read after A (the joint text)
            raise SpanError("token 9 also covers the separator")
        return real(offsets, text, start, end, **kwargs)

    monkeypatch.setattr(pairs_module, "char_span_to_tokens", straddles)
    monkeypatch.setattr(pipeline, "encode", lambda *a, **k: pytest.fail("encoded before refusing"))
    with FeatureStore.create(tmp_path / "s.h5") as store:
        with pytest.raises(PairError, match="pair 3: record B after A has no token span.*separator"):
            store.add(llama, [Pair(p.a, p.b.replace("now meets in ", ""), p.label) for p in few_pairs()],
                      name="x")
    assert leftovers(tmp_path / "s.h5") == []


@pytest.mark.parametrize("failure", [RuntimeError("device lost"), KeyboardInterrupt()])
@pytest.mark.parametrize("where", ["encoding", "assembling"])
def test_a_failed_add_leaves_the_store_as_it_was(llama, tmp_path, monkeypatch, failure, where):
    path = tmp_path / "s.h5"
    with FeatureStore.create(path) as store:
        first = store.add(llama, few_pairs(), name="kept")
        before = path.read_bytes()
        calls = {"n": 0}
        real_encode = pipeline.encode

        def dies_on_second_batch(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise failure
            return real_encode(*args, **kwargs)

        def dies(*args, **kwargs):
            raise failure

        if where == "encoding":
            monkeypatch.setattr(pipeline, "encode", dies_on_second_batch)
        else:
            monkeypatch.setattr(pipeline, "_write_records", dies)
        with pytest.raises(type(failure)):
            store.add(llama, few_pairs(8), name="lost", batch_size=4)
        assert path.read_bytes() == before and leftovers(path) == []
        assert store.groups() == ["tiny-llama/kept"] and first.labels.tolist() == [0, 1, 0, 1, 0, 1]
        monkeypatch.undo()
        store.add(llama, few_pairs(8), name="lost", batch_size=4)  # a retry needs nothing cleaned up
        assert sorted(store.groups()) == ["tiny-llama/kept", "tiny-llama/lost"]
    assert leftovers(path) == []


def test_add_replaces_a_group_only_when_asked(llama, tmp_path):
    with FeatureStore.create(tmp_path / "s.h5") as store:
        old = store.add(llama, iter(few_pairs(4)), name="rooms")  # any iterable of pairs
        with pytest.raises(StoreError, match="already holds tiny-llama/rooms; pass overwrite=True"):
            store.add(llama, few_pairs(6), name="rooms")
        new = store.add(llama, few_pairs(6), name="rooms", overwrite=True)
        assert len(new) == 6 and len(old) == 4  # a view read before the add still reads the old file


# ----------------------------------------------------------------------------- extract's parts folder


def test_overwrite_clears_the_parts_a_failed_extraction_left(llama, tmp_path, monkeypatch):
    """The reported bug: a failed extract() left STORE.parts/ that blocked a retry even with overwrite=True."""
    cases = recognition_cases(1)
    target = tmp_path / "s.h5"
    real = pipeline.encode
    calls = {"n": 0}

    def dies_on_second_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "encode", dies_on_second_batch)
    with pytest.raises(KeyboardInterrupt):
        extract(llama, "records", cases, target, batch_size=4, progress=False)
    monkeypatch.undo()
    assert (tmp_path / "s.h5.parts").exists()
    with pytest.raises(StoreError, match="another configuration.*pass overwrite"):
        extract(llama, "records", cases, target, batch_size=8, progress=False)
    extract(llama, "records", cases, target, batch_size=8, progress=False, overwrite=True)
    assert leftovers(target) == []
    fresh = extract(llama, "records", cases, tmp_path / "fresh" / "s.h5", batch_size=8, progress=False)
    with FeatureStore(target) as a, FeatureStore(fresh) as b:
        ga, gb = a["tiny-llama/records"], b["tiny-llama/records"]
        assert np.array_equal(ga.keys(1), gb.keys(1)) and np.array_equal(ga.hidden(2), gb.hidden(2))
