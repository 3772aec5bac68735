"""The consumer's membership state machine (consumer_client/membership.py): its table, walked
without a reactor."""

from __future__ import annotations

import pytest

from consumer_client.membership import (
    TRANSITIONS,
    Action,
    IllegalTransition,
    Input,
    Membership,
    State,
)

A, I, S = Action, Input, State  # noqa: E741 (short names keep the tables readable)


def walk(m: Membership, *events: Input) -> list[tuple[Action, ...]]:
    return [m.handle(e) for e in events]


def test_startup_to_fetching():
    m = Membership()
    assert m.handle(I.COORDINATOR_FOUND) == (A.REGISTER,)
    assert m.handle(I.REGISTERED) == (A.SERVE,)
    assert m.state is S.WAITING and m.registered
    assert m.handle(I.PING) == (A.REPORT_OFFSETS,)
    assert m.handle(I.START_FETCHER) == (A.START_FETCHERS, A.ANSWER)
    assert m.state is S.FETCHING and m.rebalances == 1


def test_rebalance_stop_then_start():
    m = Membership()
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER)
    # revoke before the offsets are taken, so a listener can finish its work first
    assert m.handle(I.STOP_FETCHER) == (A.STOP_FETCHERS, A.REVOKE, A.REPORT_OFFSETS, A.RELEASE)
    assert m.state is S.STOPPED
    assert m.handle(I.PING) == (A.REPORT_OFFSETS,)
    assert m.handle(I.START_FETCHER) == (A.START_FETCHERS, A.ANSWER)
    # a StartFetcher without a StopFetcher replaces the assignment
    assert m.handle(I.START_FETCHER) == (A.STOP_FETCHERS, A.REVOKE, A.RELEASE,
                                         A.START_FETCHERS, A.ANSWER)
    assert m.rebalances == 3


@pytest.mark.parametrize("state_events", [
    (I.COORDINATOR_FOUND, I.REGISTERED),
    (I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER),
    (I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER, I.STOP_FETCHER),
])
@pytest.mark.parametrize("loss", [I.SILENCE, I.CHANNEL_LOST])
def test_losing_the_coordinator_stops_fetching_and_rediscovers(state_events, loss):
    m = Membership()
    walk(m, *state_events)
    actions = m.handle(loss)
    assert m.state is S.DISCOVERING
    assert actions[0] is A.STOP_FETCHERS and actions[-1] is A.DISCOVER
    assert A.RELEASE in actions and A.CLOSE_CHANNEL in actions


def test_fetch_failure_reconnects_only_while_fetching():
    m = Membership()
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED)
    assert m.handle(I.FETCH_FAILED) == ()
    m.handle(I.START_FETCHER)
    assert m.handle(I.FETCH_FAILED)[-1] is A.DISCOVER
    assert m.state is S.DISCOVERING


def test_refused_registration_retries_rejected_fails():
    m = Membership()
    walk(m, I.COORDINATOR_FOUND)
    assert m.handle(I.REFUSED) == (A.CLOSE_CHANNEL, A.DISCOVER)
    assert m.handle(I.DISCOVERY_FAILED) == (A.DISCOVER,)
    walk(m, I.COORDINATOR_FOUND)
    assert m.handle(I.REJECTED) == (A.CLOSE_CHANNEL, A.FAIL)
    assert m.state is S.FAILED
    assert m.handle(I.SILENCE) == ()
    assert m.handle(I.CLOSE) == (A.FINISH,)
    assert m.done


def test_a_login_refused_while_discovering_fails_without_a_channel():
    m = Membership()
    assert m.handle(I.REJECTED) == (A.FAIL,)
    assert m.state is S.FAILED
    assert m.handle(I.CLOSE) == (A.FINISH,)


@pytest.mark.parametrize("auto_commit", [True, False])
@pytest.mark.parametrize("before", [(I.START_FETCHER,), (I.START_FETCHER, I.STOP_FETCHER)])
def test_close_stops_revokes_then_leaves_and_is_done_when_the_leave_is_answered(
        auto_commit, before):
    m = Membership(auto_commit=auto_commit)
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED, *before)
    # Fetchers stop and the listener hears of the revocation before the leave goes out.
    assert m.handle(I.CLOSE) == (A.STOP_FETCHERS, A.REVOKE, A.SEND_LEAVE)
    assert m.state is S.DEPARTING and m.registered
    assert m.handle(I.CLOSE) == ()  # a second close() changes nothing
    assert m.handle(I.LEFT) == (A.CLOSE_CHANNEL, A.FINISH)
    assert m.done
    assert m.handle(I.LEFT) == () and m.handle(I.LEAVE_FAILED) == ()  # late answers


def test_while_the_leave_is_out_the_channel_is_answered_with_the_final_offsets():
    m = Membership(auto_commit=True)
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER, I.CLOSE)
    assert m.handle(I.PING) == (A.REPORT_OFFSETS,)
    assert m.handle(I.STOP_FETCHER) == (A.REPORT_OFFSETS,)
    assert m.handle(I.START_FETCHER) == (A.ANSWER,)  # acknowledged, never started
    assert m.handle(I.FETCH_FAILED) == ()
    assert m.handle(I.CLOSE_TIMEOUT) == ()
    assert m.state is S.DEPARTING and m.rebalances == 1


def test_an_unanswered_leave_falls_back_to_handing_over_on_the_next_two_pings():
    m = Membership(auto_commit=True)
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER, I.CLOSE)
    assert m.handle(I.LEAVE_FAILED) == ()
    assert m.state is S.CLOSING
    assert m.handle(I.START_FETCHER) == (A.ANSWER,)  # leaving anyway: not started
    # already revoked when the close began: not a second time
    assert m.handle(I.PING) == (A.REPORT_OFFSETS, A.ARM_CLOSE_TIMER)
    assert m.state is S.LEAVING
    assert m.handle(I.LEFT) == ()  # a late answer to the leave: the slow path goes on
    assert m.handle(I.PING) == (A.REPORT_OFFSETS, A.CLOSE_CHANNEL, A.FINISH)
    assert m.done
    assert m.handle(I.PING) == ()  # late inputs are harmless


def test_an_unanswered_leave_without_auto_commit_closes_at_once():
    m = Membership(auto_commit=False)
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER, I.CLOSE)
    assert m.handle(I.LEAVE_FAILED) == (A.CLOSE_CHANNEL, A.FINISH)
    assert m.done


@pytest.mark.parametrize("end", [I.SILENCE, I.CHANNEL_LOST])
def test_losing_the_channel_while_the_leave_is_out_ends_the_close(end):
    m = Membership(auto_commit=True)
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER, I.CLOSE)
    assert m.handle(end) == (A.CLOSE_CHANNEL, A.FINISH)
    assert m.done


@pytest.mark.parametrize("end", [I.CLOSE_TIMEOUT, I.SILENCE, I.CHANNEL_LOST])
def test_close_with_auto_commit_is_bounded(end):
    m = Membership(auto_commit=True)
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED, I.START_FETCHER, I.CLOSE, I.LEAVE_FAILED,
         I.PING)
    assert m.handle(end) == (A.CLOSE_CHANNEL, A.FINISH)
    assert m.done


def test_close_while_waiting_for_an_assignment_leaves_too():
    m = Membership(auto_commit=True)
    walk(m, I.COORDINATOR_FOUND, I.REGISTERED)
    assert m.handle(I.CLOSE) == (A.SEND_LEAVE,)
    assert m.handle(I.LEFT) == (A.CLOSE_CHANNEL, A.FINISH)
    assert m.done


@pytest.mark.parametrize("events", [(), (I.COORDINATOR_FOUND,)])
def test_close_before_registering_is_immediate(events):
    m = Membership(auto_commit=True)
    walk(m, *events)
    assert m.handle(I.CLOSE)[-1] is A.FINISH
    assert m.done


def test_inputs_outside_the_table_are_refused():
    m = Membership()
    with pytest.raises(IllegalTransition, match="ping.*discovering"):
        m.handle(I.PING)
    walk(m, I.COORDINATOR_FOUND)
    with pytest.raises(IllegalTransition):
        m.handle(I.START_FETCHER)


def test_table_invariants():
    for (state, event), (target, actions) in TRANSITIONS.items():
        # fetchers start only on the way into FETCHING
        if A.START_FETCHERS in actions:
            assert target is S.FETCHING, (state, event)
        # leaving a registered state towards discovery always stops fetchers first
        if target is S.DISCOVERING and state in (S.WAITING, S.FETCHING, S.STOPPED):
            assert actions[0] is A.STOP_FETCHERS, (state, event)
        # reaching CLOSED from elsewhere always finishes
        if target is S.CLOSED and state is not S.CLOSED:
            assert actions[-1] is A.FINISH, (state, event)
        # the leave goes only after the fetchers stopped (from a state that fetched) and the
        # listener heard of the revocation: its positions are final
        if A.SEND_LEAVE in actions and state in (S.FETCHING, S.STOPPED):
            assert actions[:2] == (A.STOP_FETCHERS, A.REVOKE), (state, event)
        if A.SEND_LEAVE in actions:
            assert target is S.DEPARTING, (state, event)
        # an answered leave ends the membership; nothing but the leave's answer does it early
        if event is I.LEFT and state is S.DEPARTING:
            assert target is S.CLOSED
    # every state answers every coordinator request it can receive
    for state in (S.WAITING, S.FETCHING, S.STOPPED, S.DEPARTING, S.CLOSING, S.LEAVING):
        for event in (I.PING, I.STOP_FETCHER, I.START_FETCHER):
            _, actions = TRANSITIONS[(state, event)]
            assert A.REPORT_OFFSETS in actions or A.ANSWER in actions, (state, event)


def test_history_is_kept_short():
    m = Membership()
    for _ in range(40):
        walk(m, I.COORDINATOR_FOUND, I.REFUSED)
    assert len(m.history) == 32
    assert m.history[-1] == (S.REGISTERING, I.REFUSED, S.DISCOVERING)
