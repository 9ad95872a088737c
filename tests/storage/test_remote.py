"""Datasets in a bucket (issue 13): the same samples as the local copy, read by byte range from a real
S3-compatible server (moto, on 127.0.0.1, started inside the test session)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import datareel
from datareel.cli.prepare import prepare_jsonl, prepare_webdataset
from datareel.storage.remote import remote_files
from datareel.testing import Topology, check_restore_everywhere
from s3_server import upload
from wds_helpers import build_shards


@pytest.fixture(scope="module")
def server():
    from s3_server import s3_server

    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def datasets(server, tmp_path_factory):
    """One prepared WebDataset (crude, with images and arrays), one JSONL file and a metadataset, locally
    and in the bucket ``s3://lake``."""
    from s3_server import make_bucket

    root = tmp_path_factory.mktemp("remote")
    wds = root / "wds"
    build_shards(wds)
    prepare_webdataset(wds, progress=False)
    jsonl = root / "text.jsonl"
    jsonl.write_text("".join(f'{{"i": {i}, "text": "line {i}"}}\n' for i in range(23)))
    prepare_jsonl(jsonl)
    meta = root / "mix.yaml"
    meta.write_text(
        "__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - {path: wds, weight: 2}\n      - {path: text.jsonl, weight: 1}\n"
    )
    make_bucket("lake")
    upload(wds, "s3://lake/data/wds")
    upload(jsonl, "s3://lake/data")
    upload(Path(f"{jsonl}.idx"), "s3://lake/data")
    upload(meta, "s3://lake/data")
    return root, "s3://lake/data"


class Keys:
    """Samples of any source as ``{"key": ...}`` records (so a blend of two formats collates)."""

    def encode_sample(self, sample):
        return {"key": f"{sample['__source__']}/{sample['__key__']}"}


def _records(dataset) -> list:
    out = []
    for source in getattr(dataset, "leaves", lambda: [dataset])():
        for i in range(len(source)):
            sample = dict(source.read(i))
            out.append({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in sample.items()})
    return out


@pytest.mark.parametrize("name", ["wds", "text.jsonl", "mix.yaml"])
def test_a_dataset_in_a_bucket_reads_the_same_samples_as_its_local_copy(datasets, name):
    root, url = datasets
    local, remote = datareel.open_dataset(root / name), datareel.open_dataset(f"{url}/{name}")
    got, expected = _records(remote), _records(local)
    assert len(got) == len(expected) > 0
    for record in got + expected:
        record.pop("__restore_key__", None)  # names the shard by its path, which differs
        record.pop("__sources__", None)  # names the dataset by its path or bucket URL
    assert got == expected


def test_opening_requests_no_shard_and_a_sample_is_one_ranged_get(datasets, tmp_path):
    _, url = datasets
    one = tmp_path / "one"
    build_shards(one, shard_sizes=(3,))
    prepare_webdataset(one, progress=False)
    upload(one, "s3://lake/one-shard")
    files = remote_files()

    def opening(where: str):
        start = files.requests
        return datareel.open_dataset(where), files.requests - start

    dataset, cost = opening(f"{url}/wds")
    assert cost == opening("s3://lake/one-shard")[1]  # 4 shards or 1: the same metadata requests, none per shard
    start = files.requests
    dataset.read(0)  # shard 0 (4 samples): its first use checks it, once per process
    assert files.requests - start == 4  # its size (HEAD), its index, its end blocks; then the sample
    before = files.requests
    for i in range(1, 4):
        dataset.read(i)
    assert files.requests - before == 3  # one ranged GET per sample
    dataset.read(4)  # the first sample of shard 1: its check, then the sample
    assert files.requests - before == 7


@pytest.mark.workers
def test_elastic_restore_on_a_remote_dataset(datasets):
    _, url = datasets
    report = check_restore_everywhere(
        datareel.open_dataset(f"{url}/wds"),
        global_batch_size=6,
        before=Topology(world_size=3, num_workers=2, micro_batch_size=1),
        after=Topology(world_size=2, num_workers=1, micro_batch_size=3),
        global_batches=3,
        task_encoder=Keys(),
    )
    assert report["restored"] >= 3


@pytest.mark.workers
def test_a_blend_of_a_local_and_a_remote_dataset_restores_elastically(datasets):
    root, url = datasets
    blend = datareel.mix(
        [(datareel.open_dataset(root / "wds"), 1.0), (datareel.open_dataset(f"{url}/text.jsonl"), 1.0)]
    )
    report = check_restore_everywhere(
        blend,
        global_batch_size=4,
        before=Topology(world_size=2, num_workers=0, micro_batch_size=2),
        after=Topology(world_size=1, num_workers=2, micro_batch_size=2),
        global_batches=3,
        task_encoder=Keys(),
    )
    assert report["restored"] >= 3


def test_a_missing_shard_in_the_bucket_is_named(datasets):
    import boto3

    root, _ = datasets
    upload(root / "wds", "s3://lake/broken/wds")
    boto3.client("s3").delete_object(Bucket="lake", Key="broken/wds/parts/data-2.tar")
    dataset = datareel.open_dataset("s3://lake/broken/wds")  # opening reads no shard
    with pytest.raises(datareel.DatasetError, match=r"shard s3://lake/broken/wds/parts/data-2\.tar is missing"):
        dataset.read(int(dataset.starts[2]))


def test_a_shard_replaced_after_prepare_is_refused_as_stale(datasets):
    import boto3

    root, _ = datasets
    upload(root / "wds", "s3://lake/stale/wds")
    boto3.client("s3").put_object(Bucket="lake", Key="stale/wds/parts/data-0.tar", Body=os.urandom(3000))
    with pytest.raises(datareel.DatasetError, match=r"shard s3://lake/stale/wds/parts/data-0\.tar .*no longer matches"):
        datareel.open_dataset("s3://lake/stale/wds").check()


def test_a_url_with_no_dataset_is_a_named_error(server):
    with pytest.raises(datareel.DatasetError, match=r"s3://lake/nothing has no \.nv-meta"):
        datareel.open_dataset("s3://lake/nothing")


def test_a_shard_deleted_after_open_fails_its_read_naming_url_and_sample(datasets):
    import boto3

    root, _ = datasets
    upload(root / "wds", "s3://lake/gone/wds")
    dataset = datareel.open_dataset("s3://lake/gone/wds")
    first = int(dataset.starts[3])
    dataset.read(first + 1)  # the shard is checked and its index fetched
    boto3.client("s3").delete_object(Bucket="lake", Key="gone/wds/parts/data-3.tar")
    with pytest.raises(datareel.DatasetError, match=r"s3://lake/gone/wds/parts/data-3\.tar does not exist.*sample 0"):
        dataset.read(first)


def test_a_missing_shard_is_asked_for_once_per_process(datasets):
    import boto3

    root, _ = datasets
    upload(root / "wds", "s3://lake/missing-once/wds")
    boto3.client("s3").delete_object(Bucket="lake", Key="missing-once/wds/parts/data-1.tar")
    dataset = datareel.open_dataset("s3://lake/missing-once/wds")
    files = remote_files()
    start = int(dataset.starts[1])
    for i in range(start, start + 3):
        before = files.requests
        with pytest.raises(datareel.DatasetError, match=r"data-1\.tar is missing"):
            dataset.read(i)
        assert files.requests - before == (1 if i == start else 0)  # one HEAD, then remembered


def test_a_shard_deleted_after_open_fails_the_loader_naming_url_and_sample(datasets):
    """The same error when the sample was fetched with its micro-batch (prefetched) as when read alone."""
    import boto3

    root, _ = datasets
    upload(root / "wds", "s3://lake/gone2/wds")
    dataset = datareel.open_dataset("s3://lake/gone2/wds")
    dataset.read(1)  # the shard is checked and its index fetched
    boto3.client("s3").delete_object(Bucket="lake", Key="gone2/wds/parts/data-0.tar")
    loader = datareel.Loader(dataset, global_batch_size=4, micro_batch_size=4, shuffle=False, task_encoder=Keys())
    with pytest.raises(datareel.DatareelError, match=r"s3://lake/gone2/wds/parts/data-0\.tar does not exist.*sample 0"):
        next(iter(loader))


@pytest.fixture
def proxied(datasets, monkeypatch, request):
    """The WebDataset in a fresh bucket reached through a :class:`FaultyProxy` (options from the test's
    ``proxy`` mark). -> (proxy, URL, local copy)"""
    from s3_server import FaultyProxy, make_bucket

    root, _ = datasets
    bucket = f"proxied-{uuid.uuid4().hex[:12]}"  # MSC keeps a client per bucket: a new bucket, a new client
    make_bucket(bucket)
    upload(root / "wds", f"s3://{bucket}/wds")
    marker = request.node.get_closest_marker("proxy")
    proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"], **(marker.kwargs if marker else {}))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # a new bucket: MSC makes its client for the proxy
    yield proxy, f"s3://{bucket}/wds", root / "wds"
    proxy.close()


def test_consecutive_samples_of_one_shard_in_a_micro_batch_are_one_get(proxied):
    proxy, url, local_root = proxied
    local = datareel.open_dataset(local_root)
    shard_of = {local.key(i): local.locate(i)[0] for i in range(len(local))}
    remote = datareel.open_dataset(url)
    before = proxy.ranged_gets
    options = dict(global_batch_size=4, micro_batch_size=4, shuffle=False, repeat=False, task_encoder=Keys())
    batches = [[k.partition("/")[2] for k in b["key"]] for b in datareel.Loader(remote, **options)]
    assert batches == [[k.partition("/")[2] for k in b["key"]] for b in datareel.Loader(local, **options)]
    expected = sum(len({shard_of[k] for k in batch}) for batch in batches)  # one GET per shard per micro-batch
    checks = len(remote.shards)  # each shard's end blocks, one ranged GET on its first use
    assert proxy.ranged_gets - before - checks == expected < sum(map(len, batches))


@pytest.mark.proxy(delay=0.2)
@pytest.mark.parametrize("limit", [None, "1"])
def test_the_gets_of_a_micro_batch_are_in_flight_together(proxied, monkeypatch, limit):
    proxy, url, local_root = proxied
    if limit:
        monkeypatch.setenv("DATAREEL_REMOTE_CONCURRENCY", limit)
    from datareel.storage import remote

    monkeypatch.setattr(remote, "_PER_PROCESS", {})  # a fresh backend reads the setting
    options = dict(global_batch_size=8, micro_batch_size=8, seed=5, task_encoder=Keys())
    dataset = datareel.open_dataset(url)
    dataset.check()  # every shard checked now: what follows are the samples' GETs only
    proxy.max_in_flight = 0
    got = next(iter(datareel.Loader(dataset, **options)))["key"]
    expected = next(iter(datareel.Loader(datareel.open_dataset(local_root), **options)))["key"]
    assert [k.partition("/")[2] for k in got] == [k.partition("/")[2] for k in expected]
    if limit:
        assert proxy.max_in_flight == 1
    else:
        assert proxy.max_in_flight >= 3  # 8 samples over 4 shards: up to 4 GETs at once


def test_msc_profiles_from_the_usual_config_file(datasets, server, tmp_path, monkeypatch):
    """``msc://profile/...`` uses MSC's own configuration (here MSC_CONFIG), as Energon users have it."""
    root, _ = datasets
    config = tmp_path / "msc.yaml"
    config.write_text(
        "profiles:\n  lake:\n    storage_provider:\n      type: s3\n      options:\n"
        f"        base_path: lake\n        endpoint_url: {server}\n        region_name: us-east-1\n"
    )
    monkeypatch.setenv("MSC_CONFIG", str(config))
    remote = datareel.open_dataset("msc://lake/data/wds")
    local = datareel.open_dataset(root / "wds")
    got, expected = _records(remote), _records(local)
    for record in got + expected:
        record.pop("__restore_key__", None)
        record.pop("__sources__", None)  # names the dataset by its path or bucket URL, as the restore key does
    assert got == expected


def test_datareel_info_on_a_url(datasets, capsys):
    from datareel.cli import main

    root, url = datasets
    assert main(["info", f"{url}/wds", "--json"]) == 0
    remote = capsys.readouterr().out
    assert main(["info", str(root / "wds"), "--json"]) == 0
    local = capsys.readouterr().out
    assert remote.replace(f"{url}/wds", "ROOT") == local.replace(str(root / "wds"), "ROOT")


def test_on_error_substitute_stops_at_a_vanished_shard_as_locally(datasets):
    """A shard the index lists, gone from the bucket, is a failure of the store, not of its samples: the
    loader stops naming it, whatever the error policy, and tells no handler (issue 25: substituting its
    samples repeated others silently)."""
    import boto3

    root, _ = datasets
    upload(root / "wds", "s3://lake/subst/wds")
    dataset = datareel.open_dataset("s3://lake/subst/wds")
    boto3.client("s3").delete_object(Bucket="lake", Key="subst/wds/parts/data-3.tar")
    handled = []
    loader = datareel.Loader(
        dataset,
        global_batch_size=4,
        micro_batch_size=4,
        repeat=False,
        on_error="substitute",
        error_handler=lambda exc, key: handled.append(key),
        task_encoder=Keys(),
    )
    with pytest.raises(datareel.errors.StorageError, match=r"s3://lake/subst/wds/parts/data-3\.tar is missing"):
        list(loader)
    assert handled == []


def prepared_in_bucket(tmp_path: Path, bucket: str, **shards) -> Path:
    """build_shards(**shards) in tmp_path/raw, uploaded to s3://bucket/raw and indexed there by
    `datareel prepare`. -> the local shards (not prepared)"""
    from datareel.cli import main
    from s3_server import make_bucket

    raw = tmp_path / "raw"
    build_shards(raw, **shards)
    make_bucket(bucket)
    upload(raw, f"s3://{bucket}/raw")
    assert main(["prepare", f"s3://{bucket}/raw", "--quiet"]) == 0
    return raw


@pytest.mark.workers
def test_prepare_on_a_url_writes_the_same_metadata_as_locally(server, tmp_path):
    """`datareel prepare s3://...` indexes shards in the bucket; the result reads like a local prepare's."""
    import boto3

    from datareel.cli import main

    raw = prepared_in_bucket(tmp_path, "fresh")
    prepare_webdataset(raw, progress=False)
    for shard in sorted(p.relative_to(raw).as_posix() for p in raw.rglob("*.tar")):
        body = boto3.client("s3").get_object(Bucket="fresh", Key=f"raw/{shard}.idx")["Body"].read()
        assert body == (raw / f"{shard}.idx").read_bytes()
    got, expected = _records(datareel.open_dataset("s3://fresh/raw")), _records(datareel.open_dataset(raw))
    for record in got + expected:
        record.pop("__restore_key__", None)
        record.pop("__sources__", None)  # names the dataset by its path or bucket URL, as the restore key does
    assert got == expected
    assert main(["prepare", "s3://fresh/raw", "--quiet"]) == 1  # already prepared: refused without --overwrite
    assert main(["prepare", "s3://fresh/raw", "--quiet", "--overwrite"]) == 0
    assert len(datareel.open_dataset("s3://fresh/raw")) == len(datareel.open_dataset(raw))


def test_a_shard_replaced_by_one_of_the_same_size_is_refused_by_its_recorded_etag(server, tmp_path):
    """Size and tar end cannot tell a same-size replacement; the ETag `datareel prepare` recorded can."""
    import boto3

    from datareel.cli import main

    raw = prepared_in_bucket(tmp_path, "etags")
    body = bytearray((raw / "parts" / "data-0.tar").read_bytes())
    body[600] ^= 1  # one byte of the first member's content: same size, same index, same tar end
    boto3.client("s3").put_object(Bucket="etags", Key="raw/parts/data-0.tar", Body=bytes(body))
    with pytest.raises(datareel.DatasetError, match=r"shard s3://etags/raw/parts/data-0\.tar was replaced.*ETag"):
        datareel.open_dataset("s3://etags/raw").read(0)
    assert main(["prepare", "s3://etags/raw", "--quiet", "--overwrite"]) == 0  # the fix the message names
    assert len(datareel.open_dataset("s3://etags/raw")) == 17  # build_shards' 4 + 7 + 1 + 5 samples
    boto3.client("s3").put_object(Bucket="etags", Key="raw/.nv-meta/etags.json", Body=b"[1, 2]")
    with pytest.raises(datareel.DatasetError, match=r"etags\.json is not a valid ETag record"):
        datareel.open_dataset("s3://etags/raw")


@pytest.mark.slow  # Energon's own loader
def test_energon_reads_a_bucket_prepared_by_datareel_through_its_own_msc_support(server, tmp_path, monkeypatch):
    from megatron.energon import Cooker, DefaultTaskEncoder, WorkerConfig, get_loader, get_train_dataset, stateless

    prepared_in_bucket(tmp_path, "energon", long_names=False)
    config = tmp_path / "msc.yaml"
    config.write_text(
        "profiles:\n  bucket:\n    storage_provider:\n      type: s3\n      options:\n"
        f"        base_path: energon\n        endpoint_url: {server}\n        region_name: us-east-1\n"
    )
    monkeypatch.setenv("MSC_CONFIG", str(config))

    class Passthrough(DefaultTaskEncoder):
        cookers = [Cooker(stateless(lambda sample: sample))]

        def batch(self, samples):
            return samples

    dataset = get_train_dataset(
        "msc://bucket/raw",
        split_part="train",
        batch_size=1,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=Passthrough(),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        repeat=False,
    )
    theirs = {batch[0]["__key__"]: batch[0]["txt"] for batch in get_loader(dataset)}
    ours_ds = datareel.open_dataset("msc://bucket/raw")  # decoded, as Energon decodes: txt -> str
    ours = {ours_ds.key(i): ours_ds.read(i)["txt"] for i in range(len(ours_ds))}
    assert theirs == ours and len(ours) == 17


@pytest.mark.parametrize(
    "faults,workers",
    [
        pytest.param(dict(fail_first=7, status=503), 0, id="503 bursts"),
        pytest.param(dict(drop_first=5), 2, id="drops", marks=pytest.mark.workers),
    ],
)
def test_training_through_server_errors_yields_the_same_batches(datasets, monkeypatch, faults, workers):
    """Ranged GETs fail (503) or drop mid-body while a loader reads: the retries make it invisible."""
    from s3_server import FaultyProxy, make_bucket

    root, _ = datasets
    bucket = f"faulty-{workers}-{'drop' if 'drop_first' in faults else 'err'}"
    make_bucket(bucket)
    upload(root / "wds", f"s3://{bucket}/wds")
    proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"], **faults)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # a new bucket: MSC makes its client for the proxy
    try:
        options = dict(global_batch_size=4, micro_batch_size=4, seed=3, repeat=False, task_encoder=Keys())
        local = [b["key"] for b in datareel.Loader(datareel.open_dataset(root / "wds"), **options)]
        remote = datareel.open_dataset(f"s3://{bucket}/wds")
        got = [b["key"] for b in datareel.Loader(remote, num_workers=workers, **options)]
        name = remote.name
        assert [[k.removeprefix(f"{name}/") for k in b] for b in got] == [
            [k.removeprefix(f"{name}/") for k in b] for b in local
        ]
        assert proxy.fail_first == 0 and proxy.drop_first == 0  # every injected fault was hit
    finally:
        proxy.close()


def test_a_local_metadataset_may_name_datasets_in_a_bucket(datasets, tmp_path):
    root, url = datasets
    (tmp_path / "mixed.yaml").write_text(
        "__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - {{path: {url}/wds, weight: 1}}\n      - {{path: {root / 'text.jsonl'}, weight: 1}}\n"
    )
    mixed = datareel.open_dataset(tmp_path / "mixed.yaml")
    leaves = [getattr(leaf, "base", leaf) for leaf in mixed.leaves()]
    assert [str(getattr(leaf, "root", getattr(leaf, "path", None))) for leaf in leaves] == [
        f"{url}/wds",
        str(root / "text.jsonl"),
    ]
    assert leaves[0].read(0)["__key__"] == datareel.open_dataset(root / "wds").read(0)["__key__"]
