"""k = "auto" and proposer = "auto": each step, the drafts worth most to the reply's speed.

A step of k drafts emits on average E(k) = 1 + sum_i prod_(j<=i) a_j tokens (acceptance.py) and
costs catch-up + drafting(k) + verify(k + 1) seconds; a plain step emits 1 token for verify(1).
A second is worth R tokens, the reply's recent speed (never below plain decoding's): each step
the policy takes, over the proposers it may use and each k they allow, the option of most
E - R * seconds, plain decoding included. Against R, not against plain decoding: a draft model at
k = 15 makes 16 tokens in 14 ms, faster than plain steps, yet where the n-gram proposer copies at
3 tokens a millisecond those 14 ms are worth 42 tokens, so where the copy breaks off for a token,
a plain step and back to copying wins. (At R = the best speed a reply can keep, the step
of most E - R * seconds is the one that keeps it.) In a reply's last steps the time saved writes
no more of it: there R is plain decoding's. Acceptance is estimated per proposer and per the
proposer's own reading of the context (its `bucket`: the n-gram proposer's match length), costs
from the run's own steps (step_costs.py). A proposer that carries a measurement of itself (a
DFlash drafter trained here: what its training saw it keep) starts from that and leans on it
(acceptance.py, `known`), so a run of misses by chance does not send a drafter known to be good
out, where nothing it sees would bring it back.

Past the positions it has recent evidence of, a proposer's curve is the shallower positions'
word only: one whose drafts cost time (a draft model) goes at most twice as deep as it has seen,
one whose drafts are nearly free (n-gram) as deep as the curve says. For the nearly free ones k
is chosen on a hopeful curve (acceptance.py: each position with little recent evidence raised by
one standard error): a miss at the first draft leaves the deep positions unreached for a while,
and a curve that only ever shrinks there would settle on short drafts of a copy that runs long,
while a deeper draft costs only a little more verify time. The expected tokens shown and learnt
from stay the plain estimate's. A proposer that carries a measurement of every position (a DFlash
drafter trained here) is weighed by its estimates alone: its measurement is the evidence hope
stands in for.

A draft model that sat steps out first runs the tokens it missed (`Proposer.behind`): that
catch-up is part of coming back, so it is added to the option's cost, and learnt apart from the
cost of drafting k, which only proposals in a run of drafting steps measure; a catch-up that
computes the target's states of the tokens again (a DFlash drafter that let the target stop
keeping them, `Proposer.missing`) costs passes of the target (context_states.recompute_seconds),
and is learnt apart from one that reads states kept for it. One that holds
nothing of the reply yet (a chat's draft model; the bench's is primed) reads the prompt first
whichever step it joins: that is its prefill, no cost of this step's choice.

A proposer that loses sits out, so its estimates would stop following the text: now and then
it gets a probe step instead of the best option, drafting as a proposer nothing is known of
would. Probes are paid from a budget: each step sat out earns PROBE_SHARE of that step's time, a
probe may be taken if the budget covers what it would lose against the best option should none
of its drafts be kept, and spends what it did lose (at R; a probe that did better refunds, up to
MAX_CREDIT). So where a proposer never pays, probing costs about PROBE_SHARE of the time, a cheap
proposer (n-gram) probes far more often than an expensive one (a draft model), more so against
plain steps than against a copy at many tokens a step, and comes back as soon as the text turns
its way. A proposer starts with FIRST_CREDIT, one failed probe against plain decoding, so a draft
model is tried in a reply's first steps; once one drafts a step on its estimates, what is left of
it is dropped, its work done (a drafter whose drafts were never kept spent it on four probes in a
row after its first misses, 0.4 % of a reply, replayed).

Estimates carry from reply to reply (a chat keeps its proposers), but each new reply starts from
REPLY_CARRY of the last one's evidence: its text may be of another kind (a haiku after an
explanation), and its first steps then move the estimates twice as fast as they would mid-reply.
On the bench's conversation and a second one, traced with the real target and a trained DFlash
drafter and replayed with the H200's step costs (bench/cpu/policy_trace.py, nineteenth run),
half carried took proposer auto from 1.046-1.087x the best fixed setting to 1.062-1.100x.

A proposer whose drafts were made behind the last verify step (Proposer.drafted_ahead: a DFlash
drafter, unless SPECCHAT_DRAFT_AHEAD=0) has mostly paid for them while the host read that step: its
cost then is what of the pass the host did not hide, learnt apart (`Estimates.ahead`) from that
of a pass made for the step. One of several proposers (proposer auto's) drafts ahead only where
that pays (`drafts_ahead`): where the share of its steps followed by another of its own (`again`)
weighs what the pass saves the next step above its device time, spent for nothing otherwise.

A drafter whose pass for the next step was drafted ahead is a witness for proposer auto's copy
(the n-gram proposer): where the copy's first draft is the drafter's, the copy runs on (on the
traced conversations, its first draft kept 94-96 % of the time against 18-27 % where they
disagreed: bench/cpu/agreement.py). So the copy's acceptance is learnt per reading as well as per
match length (AGREES, DISAGREES), and the drafter's own per whether it is sure of its first draft
(SURE, UNSURE: its probability of it, read with the drafts); the pass is read before choosing
(the host waits for it there, having weighed every option under each reading; the loop counts
that wait in the step it chose). With SPECCHAT_WITNESS=1 the drafter drafts ahead behind the
copy's steps too while that pays (`drafting_ahead`): while what the reading was worth of late
(`Estimates.insight`: the value lost, where the reading was not the usual one, had the step been
chosen on the usual one) and the pass it saves where the drafter drafts next outweigh the device
time of a pass spent on nothing else. Off by default: on the H200 that made the bench's
conversation 8-10 % slower (twenty-second run), for costs the replay does not see.

A member sitting a step out whose drafts are known anyway (the copy's lookup, a witness's pass
read for a reading: Proposer.peek) learns what they would have kept from the step's tokens
(`watched`): its estimates follow the text without probes, and it is not probed.

Within a run of copy steps that keep every draft at the copy's deepest k, the policy takes the
last choice again without weighing (`repeat`, REPEATS in a row at most): keeping every draft
only raised that option, and between a copy's steps the host's time is what the device waits for.

Where plain steps win and nothing but the budgets changes until one could pay for a probe (no
proposer's bucket follows the text), the policy asks for that many plain steps at once, which the
generation runs back to back with one host wait.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass, field

from engine.limits import AUTO, MAX_K, MAX_STEP
from engine.speculation.acceptance import Acceptance
from engine.speculation.proposers.base import Proposer, common_prefix
from engine.speculation.step_costs import CostTable, OnePassCost, RelativeCost, step_costs

PROBE_SHARE = 0.01  # of the time spent sitting out, what probes may cost
MAX_CREDIT = 4.0  # plain steps' time: no burst of probes after a long time out
FIRST_CREDIT = 1.5  # plain steps' time: one probe that fails against plain decoding
RATE_FADE = 0.9  # weight left to earlier steps in the reply's speed R (about 10 steps' memory)
PRIOR_CURVE = Acceptance().tokens()  # E(k) of a proposer nothing is known of
EXPLORE = 0.25  # plain steps' time: drafting that costs less than this more is nearly free to try
# plain steps' time: drafts that cost less to make are weighed by their hopes (an n-gram lookup,
# some 0.03). Not a drafter's pass (0.2 on the H200): one with no measurement of itself, whose
# drafts were never kept, drafted its first 7 steps on hope where plain steps won, 1.2 % of a
# 256-token reply (replayed)
NEARLY_FREE = 0.1
IN_RUN = 1  # tokens behind of a proposal in a run of drafting steps (after a bonus: the bonus)
REPLY_CARRY = 0.5  # share of a proposer's evidence a new reply starts from
OPTIMISM = 1.0  # standard errors each acceptance is raised by when choosing k of nearly free drafts
AHEAD_SHARE = 0.25  # of a pass's seeded cost, what one made behind the verify step is first taken to cost
AGAIN_START = 0.5  # share of its drafting steps followed by another of its own, first guessed
# a text-following proposer's buckets where a witness's first draft agrees or disagrees with its
# own (added to its match length, which still tells a copy that runs long from one that does not)
AGREES, DISAGREES = 100, 200
# of a pass made for its step (host launch and device), the device time one drafted ahead takes:
# 0.17 of 0.25 ms on the H200 (twenty-first run)
PASS_DEVICE_SHARE = 0.7
# a witness's own buckets where it is sure of its first draft or not (added to its bucket), and
# the probability of it past which it is sure: better than even
SURE, UNSURE = 10, 20
SURE_AT = 0.5
READINGS = {AGREES: "the drafter's first draft is the copy's", DISAGREES: "the drafter's first draft is not the copy's",
            SURE: "the drafter is sure of its first draft", UNSURE: "the drafter is unsure of its first draft"}
REPEATS = 8  # copy steps in a row taken again unweighed, at most, before weighing every option again
INSIGHT_START = 1.0  # tokens a step a witness's reading is first taken to be worth
INSIGHT_RETURN = 0.98  # what of its insight a witness that does not witness keeps a step (from INSIGHT_START)
# plain steps asked for at once, at most: each time the policy chooses again after them the device
# waits for the host (the read, the steps written out, the choice, the next launch). Asking for
# at most 16, k auto where it drafted nothing was 0.02-0.05 ms a token slower than plain decoding
# (H200, twenty-first run: up to 0.3-0.8 ms a choice); 8 * MAX_STEP takes that under 0.5 %
MOST_PLAIN = 8 * MAX_STEP


@dataclass
class Choice:
    """What one step runs: `proposer` with k drafts (None, 0: a plain step), and why."""

    proposer: Proposer | None
    k: int
    tokens: float = 1.0  # expected tokens of the step
    seconds: float = 0.0  # its expected cost, a catch-up included
    plain_seconds: float = 0.0  # a plain step's
    probe: bool = False  # taken to learn, not because it wins
    bucket: int = 1
    behind: int = 0  # tokens the proposer reads before drafting, beyond a run's (Proposer.behind)
    recompute: bool = False  # ... whose target states are computed again first (Proposer.missing)
    catch_up: float = 0.0  # expected seconds of reading them, in `seconds`
    prompt: bool = False  # the proposer holds nothing of the reply yet: reading it is its prefill
    worth: float = 0.0  # R: tokens a second of this reply is worth
    displaced: float = 0.0  # a probe: the value of the step it was taken instead of
    steps: int = 1  # a plain step: how many to take before choosing again
    hoped: float | None = None  # nearly free drafts: the tokens they were weighed by (above `tokens`)
    # its drafts were made behind the last verify step (Proposer.drafted_ahead)
    ahead: bool = False
    # a pass drafted ahead runs on the device before this step: its own drafts' (`ahead`), or
    # another member's, drafted for a step it does not draft or to witness this one's copy
    after_pass: bool = False
    # members sitting the step out whose drafts are known (AdaptivePolicy.watching): (member,
    # bucket, drafts), learnt from once the step's tokens are
    watched: list = field(default_factory=list)
    reading: str = ""  # what a witness's pass said of this option (the teaching view shows it)
    repeats: int = 0  # taken again unweighed, within a run of copy steps that kept every draft (`repeat`)

    @property
    def value(self) -> float:
        """Expected tokens (hoped for, where drafts are nearly free) less what its time is worth at R."""
        return (self.tokens if self.hoped is None else self.hoped) - self.worth * self.seconds

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")

    @property
    def gain(self) -> float | None:
        """Expected tokens per second over plain decoding's (None where no costs are known)."""
        if self.seconds <= 0 or self.plain_seconds <= 0:
            return None
        return self.rate * self.plain_seconds


def best_k(tokens: list[float], drafting: list[float], verify: list[float], ks: range,
           worth: float) -> tuple[int, float, float]:
    """(k, expected tokens, expected seconds) of the k in `ks` of most tokens less `worth` tokens
    per second of its cost, from E(k) (`tokens`), the cost of drafting k and of a verify step of
    n, each indexed by k or n."""
    best, best_tokens, best_seconds, best_value = 0, 0.0, 0.0, float("-inf")
    for k in ks:
        t, s = tokens[k], drafting[k] + verify[k + 1]
        if t - worth * s > best_value:
            best, best_tokens, best_seconds, best_value = k, t, s, t - worth * s
    return best, best_tokens, best_seconds


def catch_up_key(behind: int, recompute: bool = False) -> int:
    """Catch-ups are learnt per length up to a step's, then per step's worth of tokens; those that
    compute the target's states again under the negated key (their seed: Proposer.catch_up_seed)."""
    key = behind if behind <= MAX_STEP else MAX_STEP * -(-behind // MAX_STEP)
    return -key if recompute else key


class Estimates:
    """What the policy knows of one proposer: acceptance per bucket, costs, its probe budget."""

    def __init__(self, proposer: Proposer, step_cost: Callable[[object], CostTable], credit: float,
                 verify: CostTable):
        self.buckets: dict[int, Acceptance] = {}
        # its own verify steps against the target's plain ones: a DFlash step keeps the target's
        # states, which an n-gram step of the same length does not, and after a pass drafted
        # ahead runs that pass first (one table for all made a DFlash k 15 look as cheap as the
        # n-gram's 16-token steps and its k 4 as dear as its own: k 13 a step, H200)
        self.verify = RelativeCost(verify)
        self.verify_ahead = RelativeCost(self.verify)
        table = OnePassCost if proposer.drafts_in_one_pass else CostTable
        self.drafting = table(lambda k: proposer.drafting_seed(k, step_cost))
        # drafts made behind the last verify step: what of their pass the host did not hide
        self.ahead = table(lambda k: AHEAD_SHARE * proposer.drafting_seed(k, step_cost))
        self.catch_up = CostTable(lambda n: proposer.catch_up_seed(n, step_cost))
        self.credit = credit  # seconds probes may still cost (see PROBE_SHARE)
        self.known = proposer.known_acceptance()  # each bucket's estimates start from it
        # of its drafting steps among others' (proposer auto), the share the next step drafted
        # with it again, moving as R does: what a pass drafted ahead is worth (drafts_ahead)
        self.again = AGAIN_START
        self.tried = False  # whether it has drafted a step yet
        # as a witness (AdaptivePolicy.drafting_ahead): tokens a step its reading was worth, moving
        # as R does, and the share of readings that agreed
        self.insight = INSIGHT_START
        self.agreeing = 0.5
        # of another member's drafting steps, the share the next step drafted with it
        self.joins = AGAIN_START

    def new_reply(self) -> None:
        """A new reply: what the last one showed counts for less (REPLY_CARRY)."""
        for found in self.buckets.values():
            found.shrink(REPLY_CARRY)

    def acceptance(self, bucket: int) -> Acceptance:
        found = self.buckets.get(bucket)
        if found is None:
            found = self.buckets[bucket] = Acceptance(known=self.known)
        return found

    def verify_costs(self, ahead: bool = False) -> RelativeCost:
        """Its verify steps' costs: after a pass drafted ahead (`ahead`), or after one made for
        the step."""
        return self.verify_ahead if ahead else self.verify

    def drafting_costs(self, ahead: bool = False) -> list[float]:
        """[0, cost of drafting 1 .. MAX_K]: a pass made for the step, or one already made behind
        the last verify step (`ahead`), of which only what the host did not hide is left to pay."""
        return (self.ahead if ahead else self.drafting).upto(MAX_K)

    def catching_up(self, behind: int, recompute: bool = False) -> float:
        return self.catch_up(catch_up_key(behind, recompute)) if behind > IN_RUN or recompute else 0.0


class AdaptivePolicy:
    """Chooses each step's proposer and k for a generation whose proposer or k is "auto".

    Estimates live on the proposers (so a chat's next reply starts from what this one learnt),
    step costs with the target model, the reply's speed R with the policy (one per reply)."""

    def __init__(self, model, step_cost: Callable[[object], CostTable] = step_costs):
        self.step_cost = step_cost
        self.verify = step_cost(model)
        self.tokens = self.seconds = 0.0  # the reply's steps so far, faded by RATE_FADE
        self.met: set[int] = set()  # the proposers this reply has asked about
        self.last: Proposer | None = None  # the proposer the last step drafted with
        self.streak: Choice | None = None  # the last choice, where `repeat` may take it again
        # a drafter drafts ahead to witness a copy (drafting_ahead) with SPECCHAT_WITNESS=1; by
        # default only for a step of its own: on the H200 (twenty-second run, bench/RESULTS.md)
        # witnessing made the conversation 8-10 % slower, where the replay had it 4 % faster
        self.witnessing = os.environ.get("SPECCHAT_WITNESS", "0") == "1"

    def estimates(self, proposer: Proposer) -> Estimates:
        if id(proposer) not in self.met:  # the first time this reply asks about it
            self.met.add(id(proposer))
            if proposer.estimates is not None:
                proposer.estimates.new_reply()
        if proposer.estimates is None:
            # A proposer nothing is known of starts with a budget for one probe, so it is tried
            # at once: on the prior alone a model drafter (a step of its own per draft) never
            # looks worth it, and a budget earned from zero would first let it try some 100 steps
            # in, when a short reply is over.
            credit = FIRST_CREDIT * self.verify(1)
            proposer.estimates = Estimates(proposer, self.step_cost, credit, self.verify)
        return proposer.estimates

    def worth(self, plain: float) -> float:
        """R: tokens a second of this reply is worth, its recent speed; never below plain
        decoding's, which is always there to take."""
        recent = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return max(recent, 1.0 / plain)

    def choose(self, proposers: list[Proposer], context: list[int], limit: int) -> Choice:
        repeated = self.repeat(proposers, context, limit)
        if repeated is not None:
            return repeated
        verify = self.verify.upto(MAX_K + 1)
        plain = verify[1]
        # the last steps of a reply: the time they save writes no more of it, so a step is
        # weighed against plain steps only
        worth = self.worth(plain) if limit >= MAX_K else 1.0 / plain
        best = plain_step = Choice(None, 0, 1.0, plain, plain, worth=worth)
        options = []
        # a member whose pass for this step ran behind the last verify step: its drafts are made
        # (and another member's copy is read against them), and its device time comes before
        # whatever this step runs
        witness = next((p for p in proposers if p.drafted_ahead(context)), None)
        pending = []  # (proposer, its bucket, its options weighed under each reading of the witness's pass)
        for proposer in proposers:
            bucket = proposer.bucket(context)
            if bucket == 0 or min(limit, proposer.max_k) < 1:  # nothing to propose: not sitting out by choice
                continue
            readings = self.readings(proposer, witness, proposers)
            if readings:
                # weighed under every reading before the witness's pass is read: the host waits
                # for the pass there, and the device for the host's next launch after it
                pending.append((proposer, bucket, {r: self.weigh(proposer, bucket + r, context, limit, worth, witness)
                                                   for r in readings}))
                continue
            option = self.weigh(proposer, bucket, context, limit, worth, witness)
            options.append(option)
            if option.value > best.value:
                best = option
        as_read = None  # (the copy's option as read, the one had the reading gone the other way)
        for proposer, bucket, weighed in pending:
            reading = self.reading(proposer, witness, context)
            option = weighed.get(reading) or self.weigh(proposer, bucket + reading, context, limit, worth, witness)
            if proposer is not witness:
                as_read = option, weighed[AGREES + DISAGREES - reading]
            option.reading = READINGS.get(reading, "")
            options.append(option)
            if option.value > best.value:
                best = option
        if as_read is not None:
            self.learn_insight(witness, *as_read, [plain_step, *options], best)
        if best is plain_step:
            plain_step.reading = "; ".join(o.reading for o in options if o.reading)
        # a proposer sitting this step out may be probed instead, if its budget covers what the
        # step would lose against the best should none of its drafts be kept
        probe = None
        # the witness's pass, where a reading already waited for it: only then is it read for
        # what the witness, sitting out, would have kept
        read = witness if pending else None
        watched = self.watching(options, best, context, read)
        for option in options:
            if option is best or option.proposer.estimates.credit < self.worst_loss(option, best) or any(
                    option.proposer is w[0] for w in watched):  # watched: its estimates follow the text
                continue
            asked = self.probe(option, limit)
            if option.proposer.estimates.credit >= self.worst_loss(asked, best) and (
                    probe is None or option.value > probe.value):
                probe = asked
        if probe is not None:
            probe.displaced = best.value
            probe.watched = self.watching(options, probe, context, read)
            return probe
        if best.proposer is None:
            best.steps = self.plain_run(proposers, options, best, limit)
            best.after_pass = witness is not None  # a plain step: that pass runs for nothing
        if best.steps == 1:
            best.watched = watched
        return best

    def repeat(self, proposers: list[Proposer], context: list[int], limit: int) -> Choice | None:
        """The last step's choice again, unweighed, within a run of copy steps (`streak`): the
        last step drafted with a copy (a proposer whose bucket follows the text) at its deepest
        k, kept every draft, and the copy still matches as long a suffix; no witness has drafts
        for this step. Keeping every draft only raised that option's estimates, so it stays the
        best at the speeds a copy runs; after REPEATS in a row the policy weighs every option
        again (and may probe). Between a copy's steps the host's time is what the device waits
        for: weighing took 30-40 us of it on this CPU."""
        last, self.streak = self.streak, None
        if last is None or last.repeats >= REPEATS or limit < last.k or last.proposer not in proposers:
            return None
        bucket = last.proposer.bucket(context)
        if bucket < last.bucket or any(p.drafted_ahead(context) for p in proposers):
            return None
        again = copy(last)  # a shallow copy: dataclasses.replace took as long as a third of weighing
        again.bucket, again.repeats, again.watched = bucket, last.repeats + 1, []
        return again

    @staticmethod
    def watching(options: list[Choice], chosen: Choice, context: list[int], read: Proposer | None = None
                 ) -> list[tuple[Proposer, int, list[int]]]:
        """The members sitting this step out whose drafts are known anyway (Proposer.peek), with
        their buckets: the step's tokens tell what of them would have been kept (`record`). A
        pass drafted ahead is peeked only where it was `read` for a witness's reading this step:
        else reading it would have the host wait for the pass (a drafter alone, or beside a
        draft model, whose drafts go unread), and the member learns nothing of this step."""
        watched = []
        for option in options:
            member = option.proposer
            if member is chosen.proposer and chosen.k:
                continue  # it drafts the step
            if member is not read and member.drafted_ahead(context):
                continue  # its pass, unread: peeking it would wait for it
            drafts = member.peek(context)
            if drafts:
                watched.append((member, option.bucket, drafts))
        return watched

    def weigh(self, proposer: Proposer, bucket: int, context: list[int], limit: int, worth: float,
              witness: Proposer | None) -> Choice:
        """The option of most value for `proposer` from its estimates for `bucket`."""
        est = self.estimates(proposer)
        acceptance = est.acceptance(bucket)
        # drafts that cost nearly nothing to make are weighed by what they might keep: a draft
        # never made never shows it would have been kept, and deeper ones cost only a little
        # more verify time (the expected tokens shown and recorded stay the estimate's). Not
        # those of a proposer that carries a measurement of every position (a DFlash drafter
        # trained here): raised where this reply had not reached, its deep drafts, seldom
        # kept, took k 8-15 for the tokens of k 3 (H200, sixteenth run: 0.89-0.94x its best k)
        free = est.known is None and est.drafting(MAX_K) <= NEARLY_FREE * self.verify(1)
        curve = acceptance.tokens(OPTIMISM if free else 0.0)
        option = self.option(proposer, curve, limit, worth, acceptance.explored,
                             proposer is witness, witness is not None)
        if free:
            option.hoped, option.tokens = option.tokens, acceptance.tokens()[option.k]
        behind = proposer.behind(context)
        self.place(option, bucket, behind, prompt=behind >= len(context) - 1,
                   recompute=proposer.missing(context) > 0)
        return option

    @staticmethod
    def learn_insight(witness: Proposer, read: Choice, blind: Choice, options: list[Choice], best: Choice) -> None:
        """What reading the copy against the witness was worth to this step (Estimates.insight):
        where the reading is the usual one, nothing (the choice is the one made without it);
        where it is not, the value lost had the step been chosen on the usual reading (`blind`:
        the copy's option for that reading)."""
        est = witness.estimates
        agreed = read.bucket < DISAGREES
        usual = est.agreeing >= 0.5
        est.agreeing = RATE_FADE * est.agreeing + (1.0 - RATE_FADE) * agreed
        lost = 0.0
        if agreed != usual:
            taken = max([blind, *(o for o in options if o is not read)], key=lambda o: o.value)
            lost = best.value - (read.value if taken is blind else taken.value)
        est.insight = RATE_FADE * est.insight + (1.0 - RATE_FADE) * lost

    @staticmethod
    def readings(proposer: Proposer, witness: Proposer | None, proposers: list[Proposer]) -> tuple[int, ...]:
        """The bucket offsets a reading of the witness's pass may give the proposer's bucket: a
        copy's (its first draft agrees with the witness's or not), the witness's own (sure of
        its first draft or not); none without a witness, nor where no member copies (a drafter
        alone: reading its pass would have the host wait for it, where its drafts otherwise go
        to the verify step unread, for a split of its estimates that replayed no faster)."""
        if witness is None or not any(p is not witness and p.bucket_follows_text for p in proposers):
            return ()
        if proposer is witness:
            return (SURE, UNSURE)
        return (AGREES, DISAGREES) if proposer.bucket_follows_text else ()

    @staticmethod
    def reading(proposer: Proposer, witness: Proposer, context: list[int]) -> int:
        """What the witness's pass says of the proposer's next proposal (the host waits for the
        pass here). A copy: whether its first draft is the witness's: where a trained drafter's
        first draft is the copy's, the copy ran on (on the traced conversations, the n-gram
        proposer's first draft kept 94-96 % of the time where they agreed, 18-27 % where not:
        bench/cpu/agreement.py). The witness: whether it is sure of its first draft (its
        probability at least SURE_AT: on seven traced replies, kept 13-27 % of the time below
        0.5, 51-96 % above); 0 where it does not say."""
        if proposer is witness:
            sure = witness.sureness(context)
            return 0 if sure is None else SURE if sure >= SURE_AT else UNSURE
        mine = proposer.first_draft(context)
        return AGREES if mine is not None and mine == witness.first_draft(context) else DISAGREES

    def option(self, proposer: Proposer, curve: list[float], limit: int, worth: float,
               explored: int = MAX_K, ahead: bool = False, after_pass: bool = False) -> Choice:
        """The k of most value for `proposer` from the expected-tokens curve `curve`. Past the
        `explored` positions the curve is the shallower positions' word only: a proposer whose
        drafts cost time goes at most twice as deep as it has seen (a few lucky drafts are not
        worth 15 drafts' time), one whose drafts are nearly free as deep as the curve says.
        `ahead`: its drafts were made behind the last verify step, their pass mostly paid;
        `after_pass`: a pass (its own or another's) runs on the device before its verify step."""
        top = min(limit, proposer.max_k)
        fixed = min(proposer.k, top) if proposer.k != AUTO else 0
        drafting = proposer.estimates.drafting_costs(ahead)
        verify = proposer.estimates.verify_costs(ahead or after_pass).upto(MAX_K + 1)
        deep = 2 * explored + 1
        if top > deep:
            bound, k = drafting[deep] + EXPLORE * self.verify(1), deep
            while k < top and drafting[k + 1] <= bound:
                k += 1
            top = k
        ks = range(fixed, fixed + 1) if fixed else range(1, top + 1)
        k, tokens, seconds = best_k(curve, drafting, verify, ks, worth)
        return Choice(proposer, k, tokens, seconds, self.verify(1), worth=worth, ahead=ahead,
                      after_pass=ahead or after_pass)

    def place(self, option: Choice, bucket: int, behind: int, prompt: bool, recompute: bool = False) -> None:
        """Set the option's bucket and how far behind its proposer is, and add the catch-up. A
        proposer that holds nothing of the reply reads the prompt first, whichever step it joins
        (a chat's draft model, not primed as the bench's is): that is its prefill, paid once a
        reply if it drafts at all, not the cost of this step."""
        option.bucket, option.behind, option.prompt, option.recompute = bucket, behind, prompt, recompute
        option.catch_up = 0.0 if prompt else option.proposer.estimates.catching_up(behind, recompute)
        option.seconds += option.catch_up

    def probe(self, option: Choice, limit: int) -> Choice:
        """A probe of option's proposer. It asks whether the text has turned its way, so it
        drafts as a proposer nothing is known of would (its own estimates, having kept it out,
        would ask with too few drafts); its expected tokens are still its estimates'."""
        asked = self.option(option.proposer, PRIOR_CURVE, limit, option.worth, ahead=option.ahead,
                            after_pass=option.after_pass)
        asked.tokens = option.proposer.estimates.acceptance(option.bucket).tokens()[asked.k]
        self.place(asked, option.bucket, option.behind, option.prompt, option.recompute)
        asked.probe = True
        return asked

    @staticmethod
    def worst_loss(option: Choice, best: Choice) -> float:
        """Seconds at R that taking `option` instead of `best` loses should none of its drafts
        be kept; no less than with a single draft, its cheapest."""
        est = option.proposer.estimates
        least = option.catch_up + est.drafting_costs(option.ahead)[1] + est.verify_costs(option.after_pass)(2)
        return (best.value - 1.0) / option.worth + min(option.seconds, least)

    def plain_run(self, proposers: list[Proposer], options: list[Choice], plain: Choice, limit: int) -> int:
        """How many plain steps to take before choosing again: where nothing changes meanwhile
        but the probe budgets (no proposer reads the text for its bucket, and R has come down to
        plain decoding's), until one could be probed (at most MOST_PLAIN); the generation runs
        them back to back, up to the reply's end (the last MAX_K tokens ran one by one before, a
        host wait each)."""
        if not options or plain.worth * plain.seconds > 1.01:
            return 1
        if any(p.bucket_follows_text for p in proposers):
            return 1
        earned = PROBE_SHARE * plain.seconds
        steps = MOST_PLAIN
        for option in options:
            asked = self.probe(option, limit)
            short = self.worst_loss(asked, plain) - option.proposer.estimates.credit
            steps = min(steps, max(1, math.ceil(short / earned)))
        # up to the reply's last token where it is near (`limit` counts at most MAX_K more);
        # the generation ends a run at the reply's budget and the cache's room itself
        return steps if limit >= MAX_K else min(steps, limit + 1)

    def drafting_ahead(self, members: list[Proposer], drafted: Proposer | None) -> Proposer | None:
        """The member of several (proposer auto's) that drafts the next step's pass behind this
        step's verify step (Proposer.draft_ahead), if any; `drafted`: the member this step drafts
        with (None: a plain step). The drafter of this step, where it is expected to draft the
        next one too (`drafts_ahead`); else a drafter that witnesses a member whose copy follows
        the text (`reading`): its drafts, made on the device while the host reads the step,
        tell whether the copy goes on."""
        if drafted is not None and drafted.can_draft_ahead() and self.drafts_ahead(drafted):
            return drafted
        if drafted is None or not self.witnessing:
            return None  # a plain step: no drafts to witness
        for witness in members:
            if witness.estimates is not None and witness.can_draft_ahead() and any(
                    m is not witness and m.bucket_follows_text for m in members):
                return witness if self.witness_pays(witness) else None
        return None

    def witness_pays(self, witness: Proposer) -> bool:
        """Whether what its reading was worth of late (`insight`, tokens), and the pass the next
        step takes where it drafts with the witness (`joins`: the share of another member's
        steps followed by one of its own), are worth more than the device time the pass costs
        where it does not, at R. One that does not witness meanwhile is given the benefit of the
        doubt back by degrees (INSIGHT_RETURN), as the text may have turned since."""
        est = witness.estimates
        saved = est.drafting(1) - est.ahead(1)  # should the next step draft with it
        device = self.pass_device(witness)  # should it not
        if est.insight + self.worth(self.verify(1)) * (est.joins * saved - (1.0 - est.joins) * device) > 0:
            return True
        est.insight += (1.0 - INSIGHT_RETURN) * (INSIGHT_START - est.insight)
        return False

    @staticmethod
    def pass_device(witness: Proposer) -> float:
        """Seconds of device time a pass drafted ahead adds to the step after it: what the
        witness's own steps after one took more than those after a pass made for them, learnt;
        at least PASS_DEVICE_SHARE of a pass made for its step (a witness that seldom drafts
        itself learns little of it)."""
        est = witness.estimates
        return max(est.verify_ahead(1) - est.verify(1), PASS_DEVICE_SHARE * est.drafting(1))

    def drafts_ahead(self, proposer: Proposer) -> bool:
        """Whether one of several proposers (proposer auto's) that just drafted should draft the
        next step's pass behind this verify step: it saves the next step what of a pass the host
        would wait for, should that step draft with it again, and costs the device the pass for
        nothing should it not (what its verify steps after a pass drafted ahead took more)."""
        est = proposer.estimates
        if est is None:
            return False
        saved = est.drafting(1) - est.ahead(1)
        wasted = est.verify_ahead(1) - est.verify(1)
        return est.again * saved > (1.0 - est.again) * wasted

    def record(self, choice: Choice, step, proposers: list[Proposer]) -> None:
        """Learn from the step `choice` ran: its costs, and its proposer's acceptance."""
        if step.prefill or not step.tokens:
            return
        drafted = choice.proposer if choice.k else None
        if (drafted is not None and drafted.bucket_follows_text and not choice.probe and not choice.after_pass
                and choice.k == drafted.max_k and step.accepted == choice.k):
            self.streak = choice  # a copy that kept every draft at its deepest k: `repeat`
        if self.last is not None:
            est = self.last.estimates
            est.again = RATE_FADE * est.again + (1.0 - RATE_FADE) * (drafted is self.last)
            for proposer in proposers:
                if proposer is not self.last and proposer.estimates is not None:
                    other = proposer.estimates
                    other.joins = RATE_FADE * other.joins + (1.0 - RATE_FADE) * (drafted is proposer)
        self.last = drafted
        if choice.proposer is None and not choice.after_pass:
            # a plain step's cost; not one after a pass drafted ahead for nothing, whose time is in it
            self.verify.add(len(step.drafts) + 1, step.verify_s)
        seconds = step.propose_s + step.verify_s
        self.tokens = RATE_FADE * self.tokens + len(step.tokens)
        self.seconds = RATE_FADE * self.seconds + seconds
        cap = MAX_CREDIT * choice.plain_seconds
        for proposer in proposers:
            if proposer is not choice.proposer and proposer.estimates is not None:
                est = proposer.estimates
                est.credit = min(est.credit + PROBE_SHARE * seconds, cap)
        for proposer, bucket, drafts in choice.watched:
            # what it would have kept: its drafts against the step's tokens, as far as they go
            n = min(len(drafts), len(step.tokens))
            proposer.estimates.acceptance(bucket).record(n, common_prefix(drafts, step.tokens))
        choice.watched = []  # a plain run's further steps start elsewhere
        if choice.proposer is None:
            return
        est = self.estimates(choice.proposer)
        if not est.tried and not choice.probe:
            # taken on its estimates: FIRST_CREDIT, there to have it tried, has done its work
            est.credit = min(est.credit, 0.0)
        est.tried = True
        est.verify_costs(choice.after_pass).add(len(step.drafts) + 1, step.verify_s)
        drafting = est.drafting(choice.k)
        if choice.ahead:  # the pass ran behind the last verify step: what of it was not hidden
            est.ahead.add(choice.k, step.propose_s)
        elif choice.prompt:
            seconds = step.verify_s + drafting  # its prefill is no probe's cost
        elif choice.behind > IN_RUN or choice.recompute:
            # the proposal ran the tokens missed first: that time is the catch-up's, not drafting's
            est.catch_up.add(catch_up_key(choice.behind, choice.recompute), max(0.0, step.propose_s - drafting))
        else:
            est.drafting.add(choice.k, step.propose_s)
        est.acceptance(choice.bucket).record(len(step.drafts), step.accepted)
        if choice.probe:
            # what it lost against the step it displaced, in seconds at R; a probe that did
            # better refunds, within the cap
            value = len(step.tokens) - choice.worth * seconds
            est.credit = min(est.credit - (choice.displaced - value) / choice.worth, cap)
