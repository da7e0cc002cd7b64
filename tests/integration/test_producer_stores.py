"""What the gateway keeps in ZooKeeper about producers, for every gateway and process: idempotent
producers' routes and the issuers of transactional ids; both pruned once their brokers forgot the ids."""

from __future__ import annotations

import time

from kazoo.client import KazooClient

from switchyard.identity import Identity
from switchyard.routing.layout import Layout
from workers.gateway.producers.issuers import Issued, IssuerStore
from workers.gateway.producers.store import ProducerStore
from workers.gateway.producers.translation import ProducerRoute


def test_a_transactional_ids_issuer_is_kept_and_a_carry_replaces_it(zk: KazooClient, zk_root: str) -> None:
    store = IssuerStore(zk, Layout(zk_root))
    assert store.load("orders/tx 1") is None
    store.save("orders/tx 1", Issued("primary", 6, 0))
    assert store.load("orders/tx 1") == Issued("primary", 6, 0)
    carried = Issued("standby", 6, 0, carried_from=(6, 0), at=time.time())
    IssuerStore(zk, Layout(zk_root)).save("orders/tx 1", carried)  # another process's carry
    assert store.load("orders/tx 1") == carried
    assert store.load("orders/tx 2") is None


def test_any_transactional_id_is_kept_and_what_this_store_did_not_write_is_none(
    zk: KazooClient, zk_root: str
) -> None:
    """A client names any id, empty or a path's dots among them (the fuzz test sent an empty one, which
    named the folder itself, whose empty data failed to decode)."""
    store = IssuerStore(zk, Layout(zk_root))
    for name in ("", ".", "..", "a/b", "zookeeper"):
        assert store.load(name) is None
        store.save(name, Issued("standby", 3, 1))
        assert store.load(name) == Issued("standby", 3, 1), name
    zk.create(f"{Layout(zk_root).folder('transactional')}/t-garbage", b"not json")
    assert store.load("garbage") is None


def test_only_what_was_untouched_for_long_is_pruned(zk: KazooClient, zk_root: str) -> None:
    layout = Layout(zk_root)
    issuers, routes = IssuerStore(zk, layout), ProducerStore(zk, layout)
    issuers.save("tx-old", Issued("primary", 1, 0))
    routes.save(Identity("app"), 7, ProducerRoute("primary", None), -1)
    time.sleep(2)
    issuers.save("tx-new", Issued("primary", 2, 0))
    routes.save(Identity("app"), 8, ProducerRoute("primary", None), -1)
    stat = zk.exists(f"{layout.folder('transactional')}/t-tx-new")
    assert stat is not None
    between_s: float = stat.mtime / 1000 - 1  # a second before the newer ones were written, after the older

    def age() -> float:
        return time.time() - between_s

    assert issuers.prune(older_than_s=3600) == 0
    assert routes.prune(older_than_s=3600) == 0
    assert issuers.prune(older_than_s=age()) == 1
    assert routes.prune(older_than_s=age()) == 1
    assert issuers.load("tx-old") is None
    assert issuers.load("tx-new") is not None
    assert routes.load(Identity("app"), 7)[0] is None
    assert routes.load(Identity("app"), 8)[0] is not None
