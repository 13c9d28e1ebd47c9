"""Approvals and effects: a question asked, decided once, and the one execution it allows.

Every answer is a compare-and-set that records who decided and when, refused
when the person is not among the approvers or the question expired. An effect
is claimed once per step, only for an approved question with the very
fingerprint of the payload, and ends executed, failed or unknown; a person
settles the unknown ones. The web inbox's reads of pending questions are here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..errors import AlreadyDecidedError, ExpiredError, NotAllowedError, RefusedError, StaleError, StoreError
from .core import StoreCore
from .dialect import _check_states, _cols, _in, _json, _now, _required_row, _states, _text, _values, iso
from .records import (
    APPROVAL_STATES,
    DECISION_STATES,
    EFFECT_STATES,
    ApprovalRecord,
    EffectRecord,
    InboxRow,
)

_APPROVAL_COLS = _cols(ApprovalRecord)
_EFFECT_COLS = _cols(EffectRecord)

WITHDRAW_NODE = (
    "UPDATE approvals SET state = 'withdrawn', decided_at = ?, reason = ? "
    "WHERE run_id = ? AND node_id = ? AND state = 'pending'"
)

INSERT_APPROVAL = f"INSERT INTO approvals ({_APPROVAL_COLS}) VALUES {_values(ApprovalRecord)}"
SELECT_APPROVAL = f"SELECT {_APPROVAL_COLS} FROM approvals WHERE id = ?"
# The run's row too, so an unknown run is told from one with no approvals in the same
# statement (a run's first gate asks this of every new run).
SELECT_APPROVALS = (
    f"SELECT {_cols(ApprovalRecord, 'a.')} FROM runs r LEFT JOIN approvals a ON a.run_id = r.id "
    "WHERE r.id = ? ORDER BY a.asked_at, a.id"
)
PENDING_ALL = f"SELECT {_APPROVAL_COLS} FROM approvals WHERE state = 'pending' ORDER BY asked_at, id"
PENDING_RUN = f"SELECT {_APPROVAL_COLS} FROM approvals WHERE state = 'pending' AND run_id = ? ORDER BY asked_at, id"
PENDING_FOR_STEP = "SELECT id FROM approvals WHERE run_id = ? AND step = ? AND state = 'pending'"
LATER_FOR_STEP = "SELECT id, payload_json FROM approvals WHERE run_id = ? AND step = ? AND asked_at >= ? AND id <> ?"
SUPERSEDE = (
    "UPDATE approvals SET state = 'superseded', superseded_by = ?, decided_at = ? "
    "WHERE run_id = ? AND step = ? AND state = 'pending'"
)
# An approval already given but not yet used (a check found the world changed)
# keeps who decided and when; it only becomes unusable.
SUPERSEDE_APPROVED = (
    "UPDATE approvals SET state = 'superseded', superseded_by = ? "
    "WHERE run_id = ? AND step = ? AND state = 'approved' "
    "AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.run_id = approvals.run_id AND e.step = approvals.step)"
)
DECIDE = "UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?, reason = ?, items_json = ? WHERE id = ? AND state IN "

INSERT_EFFECT = (
    "INSERT INTO effects (run_id, step, approval_id, fingerprint, idempotency_key, state, payload_json, "
    "started_at) VALUES (?, ?, ?, ?, ?, 'executing', ?, ?) ON CONFLICT DO NOTHING"
)
SELECT_EFFECT = f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ? AND step = ?"
SELECT_EFFECTS = f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ? ORDER BY started_at, step"
FINISH_EFFECT = (
    "UPDATE effects SET state = ?, result_json = ?, error = ?, ended_at = ? WHERE run_id = ? AND step = ? AND state IN "
)
SETTLE_EFFECT = (
    "UPDATE effects SET state = ?, settled_by = ?, result_json = COALESCE(?, result_json), error = ?, "
    "ended_at = COALESCE(ended_at, ?) WHERE run_id = ? AND step = ? AND state IN ('unknown', 'failed') "
    "AND settled_by IS NULL"
)
MARK_UNKNOWN = (
    "UPDATE effects SET state = 'unknown', error = COALESCE(error, ?) WHERE run_id = ? AND state = 'executing'"
)
INTERRUPTED = "the process running this effect ended before it reported back; it may or may not have happened"


class ApprovalsMixin(StoreCore):
    """Questions and their answers, the effects they allow, and the inbox's reads."""

    # -- approvals --------------------------------------------------------

    def ask(self, approval: ApprovalRecord, *, owner: str | None = None) -> None:
        """Open a question; any older question for the same step, open or approved but unused, is superseded."""
        a = approval
        if a.state != "pending" or a.decided_by or a.decided_at is not None or a.superseded_by:
            raise ValueError("ask() takes a fresh approval: state 'pending' and no decision")
        row = tuple(_text(v) for v in msgspec.structs.astuple(a))
        try:
            with self._write() as cur:
                self._check_owner(cur, a.run_id, owner)
                cur.execute(self._q(PENDING_FOR_STEP + self._d.for_update), (a.run_id, a.step))
                older = [r[0] for r in cur.fetchall()]
                if older:
                    cur.execute(self._q(SUPERSEDE), (a.id, a.asked_at, a.run_id, a.step))
                # A loop's batch asked again lists only the items whose check changed: the
                # approval before it still holds for its other items (each claim is checked
                # against the latest question listing its item, _check_batch_latest).
                if batch_indexes(a) is None:
                    cur.execute(self._q(SUPERSEDE_APPROVED), (a.id, a.run_id, a.step))
                    if cur.rowcount:
                        older.append("approved-but-unused")
                cur.execute(self._q(INSERT_APPROVAL), row)
                data = {"approval_id": a.id, "step": a.step, "fingerprint": a.fingerprint, "superseded": older}
                self._insert_event(cur, a.run_id, "approval.asked", a.node_id, None, _json(data), a.asked_at)
        except self._d.IntegrityError as exc:
            raise self._integrity(exc, a.run_id, f"approval {a.id!r}") from exc

    def get_approval(self, approval_id: str) -> ApprovalRecord:
        row = self._one(SELECT_APPROVAL, (approval_id,))
        if row is None:
            raise self._unknown_approval(approval_id)
        return ApprovalRecord(*row)

    def approvals(self, run_id: str) -> list[ApprovalRecord]:
        rows = self._all(SELECT_APPROVALS, (run_id,))
        if not rows:
            raise self._unknown_run(run_id)
        return [ApprovalRecord(*r) for r in rows if r[0] is not None]

    def pending_approvals(self, run_id: str | None = None) -> list[ApprovalRecord]:
        rows = self._all(PENDING_ALL, ()) if run_id is None else self._all(PENDING_RUN, (run_id,))
        return [ApprovalRecord(*r) for r in rows]

    def _unknown_approval(self, approval_id: str) -> RefusedError:
        return RefusedError(
            f"no approval {approval_id!r} in the store at {self.location}; nothing was changed",
            hint="a run's approvals are listed with the run",
        )

    def decide(
        self,
        approval_id: str,
        new_state: str,
        *,
        expected: str | Iterable[str] = "pending",
        by: str,
        reason: str | None = None,
        now: float | None = None,
        items: list[int] | None = None,
    ) -> ApprovalRecord:
        """Compare-and-set one answer; every attempt, won or refused, is logged.

        ``items``: approve only these items of a loop's batch question (each must be one
        it lists); the others are declined and never run.

        Approving or rejecting is refused when ``by`` is not among the named
        approvers or the question has expired; marking it ``expired`` is the
        clock's move and skips both checks.
        """
        _check_states((new_state,), DECISION_STATES, "decision")
        states = _states(expected, APPROVAL_STATES, "approval state")
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(SELECT_APPROVAL + self._d.for_update), (approval_id,))
            row = cur.fetchone()
            if row is None:
                raise self._unknown_approval(approval_id)
            current = ApprovalRecord(*row)
            refusal = self._refusal(current, new_state, states, by, now)
            if refusal is None and items is not None:
                refusal = _items_refusal(current, new_state, items)
            chosen = None if items is None else msgspec.json.encode(sorted(set(items))).decode()
            decided = current
            if refusal is None:
                params = (new_state, by, now, reason, chosen, approval_id, *states)
                cur.execute(self._q(DECIDE + _in(len(states))), params)
                if cur.rowcount == 1:
                    decided = msgspec.structs.replace(
                        current, state=new_state, decided_by=by, decided_at=now, reason=reason, items_json=chosen
                    )
                else:  # only reachable if the engine let another writer in between
                    refusal = AlreadyDecidedError(f"approval {approval_id} was decided by someone else just now")
            data = {
                "approval_id": approval_id,
                "wanted": new_state,
                "state": decided.state,
                "won": refusal is None,
                "refused": None if refusal is None else type(refusal).__name__,
                "reason": reason,
            }
            if items is not None:
                data["items"] = sorted(set(items))
            kind = "approval.decided" if refusal is None else "approval.refused"
            self._insert_event(cur, current.run_id, kind, current.node_id, by, _json(data), now)
        if refusal is not None:
            raise refusal
        return decided

    def _refusal(
        self, a: ApprovalRecord, new_state: str, expected: tuple[str, ...], by: str, now: float
    ) -> RefusedError | None:
        if a.state not in expected:
            return AlreadyDecidedError(describe_decision(a) + "; nothing was changed")
        if new_state == "expired":
            return None
        try:
            approvers = msgspec.json.decode(a.approvers_json, type=list[str])
        except msgspec.ValidationError as exc:
            raise StoreError(f"approval {a.id} in {self.location} has unreadable approvers: {exc}") from exc
        if approvers and by not in approvers:
            return NotAllowedError(
                f"{by} may not decide approval {a.id}; it may be decided by: {', '.join(approvers)}",
                hint="ask one of them, or run the decision under their name",
            )
        if a.expires_at is not None and now >= a.expires_at:
            return ExpiredError(
                f"approval {a.id} expired at {iso(a.expires_at)}; nothing was changed",
                hint="resume the run so it asks again",
            )
        return None

    def withdraw(
        self, run_id: str, node_id: str, *, reason: str, owner: str | None = None, now: float | None = None
    ) -> int:
        """The pending question of one gate can no longer be decided (its branch was dropped)."""
        now = _now(now)
        with self._write() as cur:
            self._check_owner(cur, run_id, owner)
            cur.execute(self._q(WITHDRAW_NODE), (now, reason, run_id, node_id))
            n = cur.rowcount
            if n:
                self._insert_event(cur, run_id, "approval.withdrawn", node_id, None, _json({"reason": reason}), now)
            return n

    # -- effects ----------------------------------------------------------

    def begin_effect(
        self,
        run_id: str,
        step: str,
        *,
        approval_id: str,
        fingerprint: str,
        idempotency_key: str,
        payload_json: Any,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool:
        """Claim the one execution of an approved step.

        True: the caller alone may perform the effect now. False: an effect
        for this step (or this idempotency key) was already claimed, whoever
        holds it. Raises, claiming nothing, unless ``approval_id`` is an
        approved question about this very step with this very fingerprint,
        so the store itself never lets an unapproved payload through.
        """
        now = _now(now)
        with self._write() as cur:
            self._check_owner(cur, run_id, owner)
            cur.execute(self._q(SELECT_APPROVAL), (approval_id,))
            row = cur.fetchone()
            if row is None:
                raise self._unknown_approval(approval_id)
            self._check_approved(ApprovalRecord(*row), run_id, step, fingerprint)
            self._check_batch_latest(cur, ApprovalRecord(*row), step)
            params = (run_id, step, approval_id, fingerprint, idempotency_key, _text(payload_json), now)
            cur.execute(self._q(INSERT_EFFECT), params)
            return cur.rowcount == 1

    def begin_unasked_effect(
        self,
        run_id: str,
        step: str,
        *,
        fingerprint: str,
        idempotency_key: str,
        payload_json: Any,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool:
        """Claim the one execution of a step the plan marks ``without asking``.

        The same once-only claim as ``begin_effect`` (so a crash mid-call is
        found ``executing`` and becomes ``unknown``), with no approval to check:
        the plan's verification already allowed the opt-out.
        """
        params = (run_id, step, None, fingerprint, idempotency_key, _text(payload_json), _now(now))
        with self._write() as cur:
            self._check_owner(cur, run_id, owner)
            cur.execute(self._q(INSERT_EFFECT), params)
            return cur.rowcount == 1

    def _check_approved(self, a: ApprovalRecord, run_id: str, step: str, fingerprint: str) -> None:
        if a.run_id == run_id and step != a.step and batch_item(a, step, fingerprint):
            if a.state != "approved":
                raise RefusedError(f"{describe_decision(a)}, not approved; nothing was executed")
            return  # one item of a loop's batch, with the very payload approved for it
        if (a.run_id, a.step) != (run_id, step):
            raise RefusedError(
                f"approval {a.id} guards step {a.step!r} of run {a.run_id}, not step {step!r} of run {run_id}; "
                "nothing was executed"
            )
        if a.state != "approved":
            raise RefusedError(f"{describe_decision(a)}, not approved; nothing was executed")
        if a.fingerprint != fingerprint:
            raise StaleError(
                f"the payload for step {step!r} (fingerprint {fingerprint}) is not the one approved in "
                f"{a.id} (fingerprint {a.fingerprint}); nothing was executed",
                hint="resume the run so it asks again with the current payload",
            )

    def _check_batch_latest(self, cur: Any, a: ApprovalRecord, step: str) -> None:
        """An item of a loop's batch is claimed only with the latest question that lists it:
        one asked again (its check read changed) takes the earlier approval's place for it."""
        if step == a.step or not step.startswith(a.step + "["):
            return
        n = int(step[len(a.step) + 1 : -1])
        cur.execute(self._q(LATER_FOR_STEP), (a.run_id, a.step, a.asked_at, a.id))
        for later_id, later_payload in cur.fetchall():
            later = msgspec.structs.replace(a, id=later_id, payload_json=later_payload)
            if n in (batch_indexes(later) or ()):
                raise StaleError(
                    f"item {n} of step {a.step!r} was asked about again in {later_id} after {a.id}; "
                    "nothing was executed",
                    hint="decide the newer question",
                )

    def finish_effect(
        self,
        run_id: str,
        step: str,
        state: str,
        *,
        result_json: Any = None,
        error: str | None = None,
        expected: str | Iterable[str] = "executing",
        now: float | None = None,
    ) -> bool:
        """Compare-and-set the outcome; False means it was no longer ``expected``."""
        _check_states((state,), EFFECT_STATES - {"executing"}, "effect outcome")
        states = _states(expected, EFFECT_STATES, "effect state")
        params = (state, _text(result_json), error, _now(now), run_id, step, *states)
        with self._write() as cur:
            cur.execute(self._q(FINISH_EFFECT + _in(len(states))), params)
            won = cur.rowcount == 1
            if not won and self._one(SELECT_EFFECT, (run_id, step)) is None:
                raise RefusedError(f"no effect for step {step!r} of run {run_id} in {self.location}")
            if won:
                self._say(f"effect.{state}", run_id, step, None, None)
        return won

    def settle_effect(
        self,
        run_id: str,
        step: str,
        executed: bool,
        by: str,
        *,
        result_json: Any = None,
        reason: str | None = None,
        now: float | None = None,
    ) -> EffectRecord:
        """A person's word on an effect nobody knows the fate of (reconcile): one left
        ``unknown``, or one the server reported failed (it may have acted anyway).
        Each effect is settled once."""
        now = _now(now)
        state = "executed" if executed else "failed"
        error = None if executed else (reason or f"did not happen, according to {by}")
        with self._write() as cur:
            cur.execute(self._q(SETTLE_EFFECT), (state, by, _text(result_json), error, now, run_id, step))
            if cur.rowcount != 1:
                raise self._not_unknown(run_id, step)
            data = {"step": step, "state": state, "reason": reason}
            self._insert_event(cur, run_id, "effect.settled", step, by, _json(data), now)
            cur.execute(self._q(SELECT_EFFECT), (run_id, step))
            return EffectRecord(*_required_row(cur.fetchone()))

    def _not_unknown(self, run_id: str, step: str) -> RefusedError:
        row = self._one(SELECT_EFFECT, (run_id, step))
        if row is None:
            return RefusedError(f"no effect for step {step!r} of run {run_id} in {self.location}")
        e = EffectRecord(*row)
        by = f", settled by {e.settled_by}" if e.settled_by else ""
        return RefusedError(
            f"the effect of step {step!r} in run {run_id} is {e.state}{by}; only an effect left unknown, "
            "or one the server reported failed, can be settled, once; nothing was changed"
        )

    def mark_unknown(self, run_id: str, *, now: float | None = None, reason: str | None = None) -> int:
        """After a crash, effects caught mid-flight may or may not have happened."""
        with self._write() as cur:
            cur.execute(self._q(MARK_UNKNOWN), (reason or INTERRUPTED, run_id))
            return cur.rowcount

    def get_effect(self, run_id: str, step: str) -> EffectRecord | None:
        row = self._one(SELECT_EFFECT, (run_id, step))
        return None if row is None else EffectRecord(*row)

    def effects(self, run_id: str) -> list[EffectRecord]:
        return [EffectRecord(*r) for r in self._all(SELECT_EFFECTS, (run_id,))]

    # -- the web inbox's reads (`recipe serve`, vodou_engine/web/) ------------

    _WEB_INBOX = (
        "SELECT a.id, a.run_id, a.step, a.fingerprint, a.asked_at, a.expires_at, a.approvers_json, "
        "r.recipe_name, r.started_by, r.state, r.schedule FROM approvals a JOIN runs r ON r.id = a.run_id "
        "WHERE a.state = 'pending' ORDER BY a.asked_at, a.id"
    )
    _WEB_EXTRAS = "SELECT id, preview_json, check_json FROM approvals WHERE run_id = ?"
    _WEB_UNASKED = (
        "SELECT r.id, r.recipe_name, r.started_by, r.updated_at FROM runs r WHERE r.state = 'parked' "
        "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.state = 'pending') "
        "ORDER BY r.updated_at DESC LIMIT ?"
    )

    def inbox(self) -> list[InboxRow]:
        """Every pending question, oldest first, with its run's name, starter and state."""
        return [InboxRow(*r) for r in self._all(self._WEB_INBOX, ())]

    def parked_unasked(self, limit: int = 200) -> list[tuple[str, str, str, float]]:
        """Parked runs with no open question (theirs expired): (run, recipe, started_by, updated_at)."""
        return [tuple(r) for r in self._all(self._WEB_UNASKED, (limit,))]

    def approval_extras(self, run_id: str) -> dict[str, tuple[str | None, str | None]]:
        """Per approval of a run: the stored preview and check results (JSON text or None)."""
        return {r[0]: (r[1], r[2]) for r in self._all(self._WEB_EXTRAS, (run_id,))}


def describe_decision(a: ApprovalRecord) -> str:
    """Current state, who, and when: what a person racing for it needs to hear."""
    if a.state == "pending":
        return f"approval {a.id} is still pending"
    if a.state == "superseded":
        return f"approval {a.id} was superseded by {a.superseded_by} at {iso(a.decided_at)}"
    who = f" by {a.decided_by}" if a.decided_by else ""
    why = f" ({a.reason})" if a.reason else ""
    return f"approval {a.id} was already {a.state}{who} at {iso(a.decided_at)}{why}"


def batch_item(a: ApprovalRecord, step: str, fingerprint: str) -> bool:
    """Whether ``step`` is item N of the loop step ``a`` asked about as one batch (``reply[N]``
    of ``reply``) and ``fingerprint`` is the one that item was asked with: a batch's payload is
    ``{"items": [{"item", "payload", "fingerprint"}...]}`` (runtime/loops.py)."""
    prefix = a.step + "["
    if not (step.startswith(prefix) and step.endswith("]") and step[len(prefix) : -1].isdigit()):
        return False
    try:
        raw = a.payload_json
        doc = msgspec.json.decode(raw) if isinstance(raw, (str, bytes)) else raw
        items = doc["items"] if isinstance(doc, dict) and set(doc) == {"items"} else []
    except (msgspec.DecodeError, TypeError):
        return False
    n = int(step[len(prefix) : -1])
    if a.items_json is not None and n not in msgspec.json.decode(a.items_json):
        return False  # declined with the rest of the batch's items not chosen
    return any(isinstance(e, dict) and e.get("item") == n and e.get("fingerprint") == fingerprint for e in items)


def batch_indexes(a: ApprovalRecord) -> list[int] | None:
    """The item indexes a batch question lists, or None when it is not a batch."""
    try:
        doc = msgspec.json.decode(a.payload_json) if isinstance(a.payload_json, (str, bytes)) else a.payload_json
    except msgspec.DecodeError:
        return None
    if not (isinstance(doc, dict) and set(doc) == {"items"} and isinstance(doc["items"], list)):
        return None
    return [e["item"] for e in doc["items"] if isinstance(e, dict) and isinstance(e.get("item"), int)]


def _items_refusal(a: ApprovalRecord, new_state: str, items: list[int]) -> RefusedError | None:
    listed = batch_indexes(a)
    if new_state != "approved" or listed is None:
        return RefusedError(f"approval {a.id} is not a loop's batch to approve some items of; nothing was changed")
    if not items:
        return RefusedError(f"no item chosen to approve in {a.id}; reject it to run none; nothing was changed")
    unknown = sorted(set(items) - set(listed))
    if unknown:
        return RefusedError(
            f"item{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))} "
            f"{'are' if len(unknown) > 1 else 'is'} not in {a.id} (its items: {', '.join(map(str, listed))}); nothing was changed"
        )
    return None
