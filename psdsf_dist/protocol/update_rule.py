"""Per-server update rules for asynchronous PS-DSF.

Every T seconds a server replaces its column (tasks per user) by a function of what it alone
has: its capacities, its own column, the users' demands, weights and caps, the per-user totals
it has heard through gossip (possibly stale), optionally how many servers hold each user (also
from gossip), and a little per-user state it keeps itself.  Every rule returns a feasible column
whatever its inputs (an exact water-fill, a convex step between two feasible columns, and a final
projection that only guards round-off), and the fixed points of every rule are exactly the
PS-DSF allocations: a server whose column is its best response to the true totals does not
move.  The rules differ only in how they get there when many servers act at once on the same
stale totals.

Why the plain best response oscillates
--------------------------------------
At fixed water levels, server i's best response sets user n to ``w[n,i] L[i] - (x[n] - X[n,i])``,
i.e. it corrects n's whole error ``w[n,i] L[i] - x[n]`` by itself.  If k servers hold n and act
on the same snapshot, n's total moves by about k times its error: for k >= 2 it overshoots, and
the paper cluster (70 servers holding users 1 and 2) flips with period 2 forever.  Uniform
damping ``a`` needs ``a < 2 / (k + 1)`` for the largest k, so it is either unstable or slow for
everyone else.

Why predictive water-filling converges (when it does)
-----------------------------------------------------
With ``gain`` k[n] (:mod:`psdsf_dist.core.server_procedure`) the server values n's level at the
predicted total ``x[n] + k[n] (X_new - X_old)``, i.e. moves n by ``(w L' - x[n]) / k[n]``
(L' its new level).  If k[n] is the number of servers that really move n, n's new total is the
*average* over its servers of ``w[n,i] L'[i]`` instead of their sum.  Linearise around a PS-DSF
allocation with the structure fixed (who holds whom, one level per server, saturated columns):
with relative errors e[n] of the totals and f[i] of the levels, a server's new level is a
positive weighted average of the e of its users (weights ``c w / k``, from saturation) and
e'[n] is the plain average of f over n's servers.  So e' = P Q e with P, Q the two halves of a
random walk on the bipartite user-server graph; it satisfies detailed balance (user n has mass
phi[n] in TDM), so P Q has real eigenvalues in [0, 1]: no oscillation, geometric convergence at
the walk's spectral gap.  If s = (servers really moving n) / k[n], the eigenvalues become
``1 - s (1 - lambda)``: the period-2 mode returns once s > 2 (k under-estimated by more than 2x,
as observed); over-estimating k only slows convergence.

Estimating k.  ``predictive`` uses a secant (change of the gossiped total over the last update
divided by the server's own change), which is noisy and lags.  ``holders`` uses the count of
servers holding n, which gossip provides exactly (``ServerView.holders``; without it the rule
falls back to the secant).  Starting from zero no one holds n, k = 1, and the first round is
per-server DRF (the paper's initialisation); from then on k is the holder count.

Shared corrections and local moves (the default rule, ``split``)
-----------------------------------------------------------------
The holder count is right for a *shared* correction (n's total is off, every holder moves n the
same way) and wrong for a *local* move: a user held on k servers whose level at server i is a
little above the water level there should leave i, but with gain k it sheds only
``(x - w L) / k`` per round while its other servers, seeing its total drop, take it back; its
total hardly moves and the certificate stays off on a plateau (one random instance: residual
4.3e-3 for ~250 rounds, then machine precision at once).  The two cases differ in one thing the
server can observe: whether n's gossiped total follows the server's own move.  In a shared
correction the others move with it (total change ~ k times the own change); in a local move they
move against it (ratio ~ 0).  ``split`` starts each user at gain k and, each time the total
followed less than half of its own move, cuts the gain for that user by 10x (to at least 1);
when the total follows again, the gain returns to k.  Cutting straight to 1, or giving every
leaving user gain 1, brings the period-2 oscillation back; a geometric cut does not, because a
wrongly cut gain is restored after one round.

Signed counts.  What the linear analysis above needs is not the number of holders but the number
of servers moving n *the same way*.  When gossip reports how many servers raised and lowered
each user in the latest changes it has seen (``ServerView.raising`` / ``lowering``), ``split``
uses as k[n] the count on the side of its own last move.  A user entering or leaving many
servers at once then gets the right gain, and two groups of servers pulling one user in
opposite directions no longer both treat the other group's moves as their own (with holder
counts only, both cut their gains and can fall into a limit cycle: the Google-mix clusters).
With signed counts, the secant cut is applied only to leaving (a decrease the total does not
follow), which is the plateau above.  ``use_movers=0`` ignores the signed counts.  A move of
round-off size (below ``SECANT_MIN_CHANGE`` of the total) has no side: the gain there is the
holder count.  Otherwise, at a fixed point, a server whose round-off move shares its sign with
those of few others takes gain ~1 while every holder corrects the same round-off error:
measured, round-off grew 100x per round (paper cluster from a certified allocation plus 1e-12
noise: residual 2e-7 after 30 rounds instead of 3e-16; under message-level gossip it once
kept the certificate off for good after user 4 left).  ``noise_floor=0`` restores the old
behaviour.

Gossip delay.  The prediction assumes the other holders' moves show up in the next totals.  When
the other columns are d rounds older still (``ServerView.staleness``), the moves they made in
those rounds are missing, and each server would correct them again; ``split`` adds
``(gain - 1)`` times its own last d changes to the totals (the others' matching moves, not yet
delivered) and compares its secant against its own change of d rounds earlier.  Signed counts
are not used there: at d = 1 they are two rounds old, and an oscillation alternates its signs
every round, so they count the wrong side.  Measured on the paper cluster: a mode growing 100x
every two rounds from machine precision after user 4 leaves, and after it rejoins a period-2
swing between the exact allocation and residual 1.

The observed ratio as the gain.  Under gossip delay (d >= 1, signed counts off), the gain
restored after a cut used to be the holder count.  That is a large
over-estimate when few of the holders move: on the paper cluster one server swapping a user
held by 33 servers for another moved it at 1/33 of the needed speed, and (with the delay
compensation predicting 32 phantom moves) only every other round — 80-120 rounds from random
starts at d = 1.  ``split`` now restores the gain to the ratio it just observed (total change
over its own change, i.e. how many servers really moved n with it), capped by the holder count
(``secant_cap=0`` restores the old behaviour).  Paper cluster at d = 1: 13 / 3 / 11 rounds
(start / u4 leaves / u4 rejoins), at most 19 over 8 random starts.  With fresh totals but no
signed counts the ratio is kept out: measured, it hurts there (random suite 51 instead of 57 of
60 certified; under message-level gossip at random phases the certificate never returned after
user 4 left) — asynchronous totals mix moves of different rounds, so the ratio is noise; with
one round of delay the server's own move dominates what it sees.  Message-level gossip now
carries the signed counts (``psdsf_dist.protocol.gossip``): the Ray runtime's setting (random
phases, jitter 0.2 T, message delay 0.01 T, fanout 2, 4 exchanges per period) goes from 55 / 7 / 60
rounds to 10 / 6 / 10 at most over two seeds (``experiments/results/sim_gossip.md``).

Plateau exit.  The plateau above survives the cut: at gain 1 a server lowers a user to its own
water level, the other holders (seeing the total sag) refill it, and the entry drains at the
rate of its level gap (random-suite instance 23: 4 holders, one lowering by 0.001-0.006 tasks a
round for ~110 rounds at residual 5e-3; the three others raise it with gain 3).  ``split``
counts, per user, the rounds in a row in which its own move was a measurable decrease at gain 1
with other holders present, what it drained in them and how far the total fell.  After
``exit_after`` (6) such rounds in which the total fell by less than ``threshold`` of what was
drained, on a marginal server (its entry below the user's average share ``total / holders``),
it values the user at a total higher by the amount drained so far, doubled every further round:
the price-taker's extrapolation (the others refill what it sheds), so the entry reaches zero in
a few rounds.  Only when a single user of the column qualifies: several at once are a
reallocation of the whole column, not one user leaving.  Feasible (a water-fill at other
totals) and no change at a fixed point (nothing moves).  Random suite (200, cap 300): instance
23 121 -> 33 rounds, 147 72 -> 37, 108 253 -> 86; no other instance changes; 195/200
certified as before, median 13, p90 124 -> 123, p95 211 -> 205; paper cluster and Google mix
unchanged.  Each guard was measured: without the marginal-share gate the extrapolation fired on
a server holding half of a user (instance 50: a residual spike of 0.8, 40 -> 64-101 rounds);
without the one-user limit (with or without the fall of the total) it fired on a 2-server
instance where six users drained from one server at once (108: 253 -> never); dropping the
entry to zero outright instead of extrapolating, on a streak of rounds in which the total did
not follow, fixed 23 (-> 50-55) but broke others (57 -> 50-56 certified of 60); a streak of
rounds in which the total did not follow, each on its own, rarely reaches 6, because the drain
alternates between followed and unfollowed rounds.

Calm (``calm``, off by default).  Signed counts are right for large, coherent moves (a user
entering or leaving many servers at once) and wrong near an equilibrium, where the moves are
tiny and their signs flip from round to round: the same-side count, and with it the gain, then
switches every round (one Google-mix cluster, K = 100: a period-8 cycle with gains jumping among
91, 31, 6 and 3.1 until round ~460).  With ``calm`` > 0 a server whose own last move was below
``calm`` of every user's total uses the holder count instead, which does not flip.  ``calm=1e-4``
against off, in lock-step: whole random suite 195/200 either way, median 15 vs 13, p90 106 vs
123, p95 158 vs 205, instances over 50 rounds 59 vs 63; Google mix (seeds 0-4) 5, 3, 5 of 5 at
K = 100 / 1,000 / 10,000 (medians 99, 193, 98) vs 5, 2, 4 (172, > 300, 173); paper cluster the
same but for one random start (u4 leaves: max 5 -> 10 rounds).  Message-level gossip in the
runtime's setting: 10 / 5 / 8 rounds vs 10 / 6 / 10.  But with 10 % message loss u4's leaving
no longer certified within 30 rounds (three seeds of three; off: 7 rounds each), and at 3e-5 it
took 10-28; 1e-3 is better still in lock-step (p90 90, p95 177) and fails from the start in the
runtime's setting.  Under loss or random phases a server's small last move does not mean the
allocation is near equilibrium, and holder counts from partly stale columns over-estimate the
movers.  So ``calm`` stays off by default: a lock-step improvement that costs robustness.
Requiring the gossiped totals to be calm too (every total moved by less than 1e-4 / 1e-3 since
the server's last update) restores the lossy case (u4 leaves: 7 rounds on three seeds at 1e-4)
but also takes the lock-step gain away (suite p95 205 / 192, Google K = 100 median 155 / 146):
the gain came precisely from servers whose own moves were tiny while the totals still moved.

What did not help on the random suite (60 scenarios, cap 150; ``split`` converges on 57,
median 28, p90 104): a per-user step halved on direction flips on top of ``split`` (56, median
37); a gain below 1 for a user leaving while its total does not follow (extrapolating the
drain; hardly any change, because the drain is itself a period-8 oscillation there); letting a
cut gain grow back geometrically instead of at once (21 at x2: the under-estimated gains
oscillate); re-solving with the count of the other side when the move turns (1: in an
oscillation last round's counts are the complement); a floor on the signed gain at a fraction
of the holder count, or the holder count for small moves (no better, or worse).  Tried against
the limit cycles (quick suite 57/60, median 28, p90 103, p95 136 before): holding a user (gain
1e6, coin seeded from the column) with probability 1/2 when its own move flipped direction twice
in a row (57, median 34, p90 113, p95 130; Google mix K = 1,000 92 -> 208) or when its gain
jumped by more than 4x (55/60; 1,000 -> 130) — the cycles of period 4-8 rarely flip every
round, and holding slows the fast instances; a memory of the signed count, max of this and the
last round's (55/60, K = 1,000 -> 129) or their geometric mean (55/60); a higher noise floor
for the sign of a move, ``SECANT_MIN_CHANGE`` 1e-7 / 1e-6 / 3e-6 / 1e-5 / 1e-4 instead of 1e-9
(57 p90 103 p95 134 / 57 p90 96 p95 134 but median 30 / 57 p90 125 / 55 / 52: noise, not a
trend — single instances move by tens of rounds either way).  A cycle detector that sees a user
whose own moves cancel (decayed net move below 0.2 of the decayed gross move, decay 0.8), then:
holds it with probability 1/2 (55, median 40; Google K = 1,000 -> 227), doubles its gain (57,
median 35, p90 125), holds the whole column with probability 1/2 (49), or, at ratio 0.05,
doubles (57, p90 116; paper delay 1 rejoin 11 -> 86), holds (57, p90 99 but median 32; Google
100 -> 111) or halves its gain (56, p90 90).  Cutting a leaving user's gain only when few of its
holders move its way (same-side count at most 0.1 / 0.25 / 0.5 of the holders): Google mix much
faster (K = 100 / 1,000: 52 / 79, 57 / 49) and the paper cluster from zero 8 -> 7, but 56, 56,
55 of 60 (instance 16 — two groups of 41 and 67 servers swapping two users in a period-4 cycle
— never certifies).  Cut factor 0.3 / 0.5 / 0.03 instead of 0.1 (56 / 55 / 56); threshold 0.25
(no change).  Those coins were seeded from the column, and the lock-step harness computed one
server per group of identical servers, so a whole group drew one coin.  Independent coins
(``hold_p``; per-server seed from :func:`seeded_state`; harness ``per_server``, which gives the
grouped rounds exactly for deterministic rules) did not help either.  On the tail (instances
12, 16, 55, 57, 69, 71, 169 and the ten slowest certified; ``split``: 12, 57, 69, 71, 169 never,
16 134, 55 249, 89 272, 105 239, 118 230, 104 211, 197 205, 159 194 rounds, cap 300): holding
a cycling user with probability 0.5 / 0.25 / 0.1 lost 55, 104, 197 and 159 and certified none
of the five; at ratio 0.05 likewise; holding the whole column (the server sits the round out)
with probability 0.25 / 0.1 lost 55 and 104 (16 -> 194 / 142); only ignoring moves below 1e-2
of the total (``cycle_min``) helped one (57 -> 247 at p 0.5, 16 -> 133) while losing 55, 104
and 159.  A likely reason (not isolated): a held user's total no longer follows the other
holders' moves, so their secant cuts their gains, feeding the gain switching that makes the
cycle.  Whole suite, every server on its own coin (``rule_study.py --cycle-hold``, p 0.5,
``cycle_min`` 1e-2): 191/200 certified, median 19, p90 133, p95 281, against ``split``'s
195/200, 13, 123, 205 in the same per-server run; so ``hold_p`` stays 0.

Tried next (quick suite: 60 scenarios, cap 150; ``split`` 57/60, median 28, p90 102, p95 136,
fails 12, 55, 57).  *Share gains* (proportional response): with k[n] = x[n] / X[n, i], the
server's share of the user, the gains of n's holders satisfy sum 1/k = 1 whoever moves, so a
shared correction lands exactly without counting movers; the update is then multiplicative,
``X' = X w L / x`` — Wu and Zhang's proportional response dynamics for linear Fisher markets
(TDM is one), which converge under simultaneous updates.  But an entry that must leave only
decays by the ratio of its level gap per round, and the certificate counts it until it is dust:
21/60.  As the gain inside ``split`` (instead of the signed count): 56/60 (p90 119); the
minimum of share and holder count 56/60 (p90 112); their geometric mean 58/60, median 25, p90
94, p95 143 (fails 13 and 55 instead) — the same level.  *Momentum* (Nesterov: evaluate the rule
at the extrapolated column and totals, per user, after two same-direction moves): beta 0.5
48/60, 0.8 34/60, 0.5 after four moves 55/60; on the ``holders`` rule it helps (40/60 -> 51/60,
median 62 -> 39) but stays below ``split``.  *Drain acceleration* (a decrease doubled each round
after s0 decreases in a row): s0 3 50/60, 4 57/60 with p95 137, 6 56/60.  *Drift
extrapolation* over a window (W 6-12 rounds, a decrease not slowing down, net/gross >= 0.3-0.5,
doubling): 27-43/60 — early in a run many entries drift steadily and must not be extrapolated.
*Steady-drift exit* (the last W deltas equal within 10 %: drop the entry to zero): 55-57/60.
*A TDM start* (the Eisenberg-Gale optimum is RDM-feasible, and the solver's RDM sweeps need only
2-4 sweeps from it on Google-mix clusters): on the 16 slowest suite instances, sequential sweeps
from it certify 11 within 150 (median 79) and ``split`` 7: the plateaus remain.

The reference that frames the tail: exact *sequential* sweeps (Gauss-Seidel; every server in
turn on the true, current totals: no concurrency, no staleness) on the same 200 instances
(``experiments/results/rule_study.md``, row "sequential sweeps"): 197/200 within 300 sweeps,
median 7, p90 67, p95 148; the three it misses (69, 71, 169) are among ``split``'s five, and
certify after 350-400 sweeps (69: K = 12, N = 30; the residual sits at 3.03e-3 for 300 sweeps,
then reaches 1e-14).  So the suite's target (100 %, p95 <= 50) is beyond best-response dynamics
even without concurrency or staleness, not only beyond their lock-step emulation.  Of the 63
instances on which ``split`` needs more than 50 rounds, sequential sweeps need more than 50
on 28: the other 35 (e.g. 104: 211 vs 33, 7: 136 vs 15) are the price of
concurrency, the part a better lock-step rule could still win back (``calm=1e-4``: 59 and 27).

Google-mix figures above are on one cluster per size (seed 2011).  Over five clusters per size
(seeds 0-4, ``rule_study.md``) ``split`` certifies 5, 2 and 4 of 5 within 300 rounds at K = 100,
1,000 and 10,000 (median 172, > 300, 173), with ``calm=1e-4`` 5, 3 and 5 (99, 193, 98);
``use_movers=0`` 5, 3 and 5 (median 76, 281, 127);
sequential sweeps 5 and 5 at K = 100 and 1,000 (median 104, 83).  None of those runs is a cycle
for good: with a cap of 3,000 rounds ``split`` certifies all 15 clusters (at most 265, 1,154 and
576 rounds) and all 200 suite instances (at most 936; sequential sweeps at most 402).  On the
slowest cluster (K = 1,000, seed 3) the residual swings between 3.9e-4 and 2.4e-3 with period 4
from round ~200 to ~1,150, the totals moving by ~1e-5 of themselves and the gains steady at the
holder counts (598, 307: not switching); the mean allocation over a period has residual 3.3e-4,
so the swing is around an allocation that is not PS-DSF yet either.  Averaging (a server whose
moves cancel over ~4 rounds, decayed net below 0.2 of gross and gross below 1e-2 of its column,
jumps to its exponentially averaged column, then waits 8 rounds): 1,154 -> 1,009, 846 -> 1,190,
576 -> 418, 212 -> 196, 265 -> 112, 464 -> 448 on six slow clusters: mixed, not pursued.  A
two-pass round (every server first computes a tentative move, the signs of those moves are
counted, then each server solves again with the *current* same-side count as its gain, plus
the secant cut): quick suite 57/60, median 21, p90 76, p95 130, but the whole suite 193/200,
median 14, p90 116, p95 215, and the Google mix at K = 100 6/6, median 117 — no better
overall, at the price of a second exchange.
Against the plateaus themselves, in sequential sweeps, where the drain is steady: dropping an
entry whose last 6 decreases agree within 10 % ended some plateaus (69 >300 -> 78, 13 224 -> 116,
55 226 -> 134, 57 207 -> 150) but never certified 12 (273 before) and slowed 7 (15 -> 48);
dropping an entry lowered 5-10 sweeps in a row while its V here exceeded that of a user raised
here (a persistent local violation) fired hundreds of times on instances that converge anyway
and certified 1-2 of 10; a price-taker gain (the observed ratio, floored at 0.2 / 0.05, for a user
lowered while its total does not follow) 69 -> 71, 57 -> 92, 13 -> 135 but 7 15 -> 36 (floor 0.2)
and fails at 0.05; applied only after 5-10 such rounds in a row, floor 0.05: 69 -> 143-178, 57 ->
76-107, but 12, 55 and 89 unchanged (in 12 the leaving user drains from a group of 75 servers at
once, so each one's move is followed by the total and looks shared). In lock-step, extrapolating a
decrease along a least-squares line over the last 8-16 rounds (R^2 >= 0.9-0.97, 1-2 windows ahead)
changes nothing on the quick suite (57/60 at best, p95 134-148): the lock-step drains are too
noisy to be read as lines.
The same suite in TDM (one time-shared resource per server, the Fisher-market case): ``split``
194/200, median 19, p90 127, p95 229; sequential sweeps 200/200, median 8, p90 69, p95 154 — the
tail does not come from packing several resources on a server (TDM's gamma, though, still has
full rank: see below).  Cutting the gain only for a
decrease larger than 1e-3 / 1e-2 / 3e-2 of the entry (so that the tiny moves near equilibrium
cannot switch it): whole suite 195 / 193 / 191 of 200, p95 207 / 265 / 279.  A gain that cannot
flip with the side of the move — the larger of the two signed counts, or their sum — 184/200
(p90 202 / 249): over-estimated gains are stable but slow every exit.  A per-user "best offer"
(the total at which a server's bottleneck level would hold the user, w * level, maxed over the
servers as gossip could) to let a holder see that another server supports the user higher: a
holder's offer is always the current total (its best response puts the user's V on its level),
so no exit ever fired on the slow instances.

Where the tail comes from (whole suite, ``rule_study.csv``): not from caps or placement —
without caps ``split`` certifies 194/200 (p95 259), without placement constraints 187/200, without
either 191/200 — but from several resources per server.  With M = 1 (51 instances) the median is
5 rounds and none needs more than 50; with M = 2 / 3 / 4 the medians are 27 / 38 / 33 and 15 / 25 /
23 instances need more than 50 (sequential sweeps: 2 rounds and none over 50 at M = 1; 7 / 10 /
12 over 50 at M >= 2).  With one resource, gamma[n, i] = C[i] / D[n] is a rank-one matrix: every
user ranks the servers alike, so no user has to settle on a subset of them.  With several
resources gamma has full rank, users specialise, and which user leaves which servers (the
structure) is what the dynamics find slowly — the combinatorial part of a Fisher-market-like
equilibrium, which exact centralised methods settle by pivoting.

What remains (numbers in ``experiments/results/rule_study.md``): a tail of random instances of
two kinds.  Long near-cycles of period 4-8 (hundreds of rounds; none seen to last for good)
in which, on the suite, the signed counts and the cut switch a user's gain every round (one
instance: the same user's gain at one server takes values from 1 to 109 in consecutive
rounds) — the gain, a discontinuous function of the signs of tiny moves, is the
state that cycles.  And plateaus where a user drains from a marginal server at a rate equal to
its level gap there (~0.004 tasks per round for ~110 rounds in one instance) while the other
holders refill it; the certificate then holds to machine precision as soon as the entry hits
zero (the plateau exit above now ends those in a few rounds on a marginal server; a drain from
a server holding more than the average share is left to the slow path).  Exact sequential
sweeps share the second kind (spec), so it needs more than a faster emulation of them.
``adaptive`` (holder gain plus a per-user step halved when the change flips direction) damps
limit cycles but does not shorten plateaus.

Message-level gossip is only fast when it is fresh: with a message delay of 0.5 or 1 T, or
fanout 1, the paper cluster did not certify within 30 rounds of any event (``sim_gossip.md``;
at fanout 2 one exchange per period did not either, at fanout 4 it takes 18 / > 30 / 13),
although the snapshot model with one round of delay takes 13 / 3 / 11.  Google-mix clusters
(K = 100, N = 100) need fresher totals than the paper cluster: at random phases with fanout 2,
2 of 5 certified within 300 rounds (lock-step on one snapshot: 5 of 5), with fanout 4, 4 of 5;
``calm=1e-4``, ``use_movers=0``, no signed moves, ``adaptive`` and ``holders`` certified none
of three failing clusters at fanout 2 — freshness, not the rule, was what they lacked.
There the server sees d = 1 consistently, so the difference is that staleness differs per
server and per origin (random phases): the delay compensation assumes every other holder lags
by exactly d rounds.  Forcing d = 0 (signed counts on stale gossip) or the holder-count restore
(``secant_cap=0``) were no better in single runs.

Rules: ``best-response`` (plain), ``damped`` (``a``), ``predictive`` (secant gain), ``holders``,
``adaptive`` (``shrink``, ``grow``, ``min_step``), ``split`` (default; ``threshold``, ``factor``,
``use_movers``, ``secant_cap``, ``noise_floor``, ``exit_after``, ``calm``; randomised cycle hold,
off by default: ``hold_p``, ``cycle_ratio``, ``cycle_decay``, ``cycle_min``, ``hold_column``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.server_procedure import server_procedure
from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# Changes below this fraction of a user's total are treated as no change by the secant.
SECANT_MIN_CHANGE = 1e-9
SECANT_SMOOTHING = 0.5  # weight of the new secant in the log-space moving average
FEASIBILITY_RTOL = 1e-9  # relative slack when checking a column against its capacities
MAX_EXITS = 1
HOLD_GAIN = 1e6  # gain that holds a user where it is (split's cycle hold)
MAX_STALENESS = 3  # rounds of own changes a server remembers to compensate gossip delay


def staleness_rounds(age: float | None, period: float) -> float:
    """Rounds by which the other servers' columns lag beyond the usual one, from their median
    gossip age in seconds (:meth:`psdsf_dist.protocol.gossip.GossipState.median_age`); 0 if none
    heard."""
    return 0.0 if age is None else max(age / period - 1.0, 0.0)


@dataclass(frozen=True)
class ServerView:
    """What one server knows that changes only on churn."""

    capacity: FloatArray
    """(M,) its capacities (TDM: ignored)."""
    consumption: FloatArray
    """(N, M) per-task consumption here (``scenario.consumption(i, mode)``)."""
    gamma: FloatArray
    """(N,) tasks each user could run alone here; 0 = not eligible (or currently absent)."""
    weight: FloatArray
    """(N,) user weights."""
    max_tasks: FloatArray
    """(N,) finite backlogs (``inf`` = unlimited)."""
    mode: Mode
    num_servers: int
    """Current membership size as this server knows it (bounds estimates of k)."""
    holders: FloatArray | None = None
    """(N,) optional, changes every round: how many servers hold tasks of each user, counted
    over the columns this server has heard of (its own current column included)."""
    raising: FloatArray | None = None
    """(N,) optional, changes every round: how many servers' latest column change raised each
    user (gossip: compare the two latest versions of each column, or let the origin attach the
    sign of its change to each entry)."""
    lowering: FloatArray | None = None
    """(N,) optional: likewise, how many servers' latest change lowered each user."""
    staleness: float = 0.0
    """Optional: by how many rounds, beyond the usual one, the other servers' columns in the
    totals lag behind (gossip delay).  Rounded, at most :data:`MAX_STALENESS`."""

    @property
    def num_users(self) -> int:
        return len(self.gamma)


@dataclass(frozen=True)
class RuleState:
    """Small per-user state a server keeps between updates (one array of length N per name)."""

    arrays: Mapping[str, FloatArray] = field(default_factory=dict)
    fill: Mapping[str, float] = field(default_factory=dict)
    """Value given to users appended by :func:`resize_state`."""
    updates: int = 0
    seed: int = 0
    """Per-server seed of the rule's coins (:func:`seeded_state`); with the update count it
    fixes every draw, so runs are reproducible."""

    def get(self, name: str) -> FloatArray:
        return self.arrays[name]

    def evolve(self, **arrays: FloatArray) -> RuleState:
        merged = dict(self.arrays)
        merged.update(arrays)
        return RuleState(merged, self.fill, self.updates + 1, self.seed)

    def coins(self, size: int) -> FloatArray:
        """Uniform draws in [0, 1) for this update, from (seed, update count) alone."""
        return np.random.default_rng([self.seed, self.updates]).random(size)


def seeded_state(rule: UpdateRule, num_users: int, seed: int) -> RuleState:
    """The rule's initial state with a per-server seed (servers must draw independent coins,
    or a randomised rule cannot tell identical servers apart)."""
    return replace(rule.initial_state(num_users), seed=int(seed) & 0xFFFFFFFFFFFF)


class UpdateRule(Protocol):
    @property
    def name(self) -> str: ...

    def initial_state(self, num_users: int) -> RuleState: ...

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]: ...


def resize_state(state: RuleState, num_users: int) -> RuleState:
    """Grow (append users with the state's fill values) or shrink a state to ``num_users``."""
    arrays: dict[str, FloatArray] = {}
    for name, values in state.arrays.items():
        if len(values) >= num_users:
            arrays[name] = values[:num_users].copy()
        else:
            extra = np.full(num_users - len(values), state.fill.get(name, 0.0))
            arrays[name] = np.concatenate([values, extra])
    return RuleState(arrays, state.fill, state.updates, state.seed)


def server_view(
    scenario: Scenario,
    server: int,
    mode: Mode,
    active_users: BoolArray | None = None,
    num_servers: int | None = None,
) -> ServerView:
    """The view of ``server`` in ``scenario``; absent users get gamma 0."""
    gamma = np.array(scenario.gamma[:, server], dtype=float)
    if active_users is not None:
        gamma = np.where(np.asarray(active_users, dtype=bool), gamma, 0.0)
    capacity = scenario.server_capacity(mode)[server]
    return ServerView(
        capacity=np.array(capacity, dtype=float),
        consumption=np.array(scenario.consumption(server, mode), dtype=float),
        gamma=gamma,
        weight=np.array(scenario.weight, dtype=float),
        max_tasks=np.array(scenario.max_tasks, dtype=float),
        mode=mode,
        num_servers=scenario.num_servers if num_servers is None else int(num_servers),
    )


def is_feasible_column(
    view: ServerView, column: FloatArray, rtol: float = FEASIBILITY_RTOL
) -> bool:
    """Whether a column respects the server's capacities (to ``rtol``) and eligibility."""
    if np.any(column < -rtol) or np.any((view.gamma <= 0) & (column > 0)):
        return False
    if view.mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            used = float(np.sum(np.where(view.gamma > 0, column / view.gamma, 0.0)))
        return used <= 1.0 + rtol
    use = view.consumption.T @ column
    return bool(np.all(use <= view.capacity * (1.0 + rtol) + 1e-300))


def feasible_column(view: ServerView, column: FloatArray) -> FloatArray:
    """Project a column into the server's feasible set: no negatives, nothing on ineligible
    users, and scaled down uniformly if any capacity would be exceeded."""
    raw = np.asarray(column, dtype=float)
    # A non-finite amount is corrupt input, not a quantity: it counts as nothing.
    col = np.where((view.gamma > 0) & np.isfinite(raw), np.maximum(raw, 0.0), 0.0)
    if view.mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            used = float(np.sum(np.where(view.gamma > 0, col / view.gamma, 0.0)))
        scale = used
    else:
        used_r = view.consumption.T @ col
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(
                view.capacity > 0, used_r / view.capacity, np.where(used_r > 0, np.inf, 0.0)
            )
        scale = float(ratio.max(initial=0.0))
    if scale > 1.0:
        col = col / scale if math.isfinite(scale) else np.zeros_like(col)
    return col


def best_response(
    view: ServerView, totals: FloatArray, column: FloatArray, gain: FloatArray | float | None = None
) -> FloatArray:
    """The server procedure on a view (exact water-fill; always feasible)."""
    col = feasible_column(view, column)
    # Totals can never be below what this server itself holds.
    tot = np.maximum(np.where(np.isfinite(totals), totals, 0.0), col)
    new = server_procedure(
        view.capacity,
        view.consumption,
        view.gamma,
        view.weight,
        tot,
        col,
        view.max_tasks,
        mode=view.mode,
        gain=gain,
    )
    # The water-fill is exact and feasible; the projection only guards against round-off and
    # overflow on degenerate inputs (e.g. subnormal capacities), so the promise holds always.
    return feasible_column(view, new)


@dataclass(frozen=True)
class BestResponse:
    """The plain server procedure (diverges in lock-step; kept as the baseline)."""

    name: str = "best-response"

    def initial_state(self, num_users: int) -> RuleState:
        return RuleState()

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        return best_response(view, totals, column), state


@dataclass(frozen=True)
class Damped:
    """Uniform damping ``X + a (BR - X)``: a convex combination of two feasible columns."""

    a: float = 0.5
    name: str = "damped"

    def __post_init__(self) -> None:
        if not 0.0 < self.a <= 1.0:
            raise ValueError(f"damping a must be in (0, 1], got {self.a}")

    def initial_state(self, num_users: int) -> RuleState:
        return RuleState()

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        col = feasible_column(view, column)
        target = best_response(view, totals, col)
        return feasible_column(view, col + self.a * (target - col)), state


@dataclass(frozen=True)
class PredictiveSecant:
    """Predictive water-filling with the gain k[n] estimated by a secant on the totals."""

    smoothing: float = SECANT_SMOOTHING
    name: str = "predictive"

    def initial_state(self, num_users: int) -> RuleState:
        return _secant_state(num_users)

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        col = feasible_column(view, column)
        tot = np.maximum(np.where(np.isfinite(totals), totals, 0.0), col)
        gain, memory = _secant_gain(state, view, tot, col, self.smoothing)
        return best_response(view, tot, col, gain=gain), state.evolve(**memory)


@dataclass(frozen=True)
class PredictiveHolders:
    """Predictive water-filling with the gain k[n] = number of servers holding user n.

    The count comes from ``view.holders`` (gossip knows who holds what); a view without it
    falls back to the secant estimate of :class:`PredictiveSecant`.
    """

    name: str = "holders"

    def initial_state(self, num_users: int) -> RuleState:
        return _secant_state(num_users)

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        col = feasible_column(view, column)
        tot = np.maximum(np.where(np.isfinite(totals), totals, 0.0), col)
        gain, memory = _holders_gain(state, view, tot, col)
        return best_response(view, tot, col, gain=gain), state.evolve(**memory)


@dataclass(frozen=True)
class HoldersAdaptive:
    """:class:`PredictiveHolders`, then a per-user step on the change that shrinks when the
    change flips direction and grows back otherwise (a convex step: stays feasible)."""

    shrink: float = 0.5
    grow: float = 1.5
    min_step: float = 1e-3
    name: str = "adaptive"

    def initial_state(self, num_users: int) -> RuleState:
        base = _secant_state(num_users)
        arrays = dict(base.arrays, step=np.ones(num_users), last_change=np.zeros(num_users))
        return RuleState(arrays, dict(base.fill, step=1.0, last_change=0.0))

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        col = feasible_column(view, column)
        tot = np.maximum(np.where(np.isfinite(totals), totals, 0.0), col)
        gain, memory = _holders_gain(state, view, tot, col)
        change = best_response(view, tot, col, gain=gain) - col
        flipped = change * state.get("last_change") < 0
        step = np.where(flipped, state.get("step") * self.shrink, state.get("step") * self.grow)
        step = np.clip(step, self.min_step, 1.0)
        new = feasible_column(view, col + step * change)
        last = np.where(change != 0, change, state.get("last_change"))
        return new, state.evolve(step=step, last_change=last, **memory)


@dataclass(frozen=True)
class SplitGain:
    """Predictive water-filling that tells shared corrections from local moves.

    The gain of user n starts at the holder count k[n] (a shared correction: every holder moves
    n).  After each update the server checks whether n's gossiped total followed its own move
    of n: ``ratio = (change of the others' part of the total) / (own change, as far as the
    others could have seen it) + 1``.  If the total moved less than ``threshold`` times the
    server's own move, the other servers are moving n the other way: the move is local (n
    changing servers), so the gain for n here is cut by ``factor`` (down to 1).  When the total
    follows again, the gain returns to k[n].  With ``view.staleness`` = d > 0 the server also
    adds ``(gain - 1)`` times its own changes of the last d rounds to the totals: the other
    holders' matching moves that gossip has not delivered yet.  When the view carries signed
    counts (``raising`` / ``lowering``), k[n] is the number of servers that moved n the way this
    server did, and the cut is kept for leaving only (see the module docstring).  Under delay
    (d >= 1) a gain is restored to the observed ratio capped by k[n] (``secant_cap``; 0 = to
    k[n]).  A user lowered at gain 1 for ``exit_after`` rounds in a row on a marginal server is
    extrapolated out (plateau exit, module docstring; 0 = off).  With ``calm`` > 0 a server whose
    own last move was below ``calm`` of every total uses holder counts instead of signed counts
    (off by default: it helps in lock-step and hurts under message loss; module docstring).
    ``hold_p`` > 0 holds a user whose own moves here cancel out with that probability, on the
    server's own seeded coin (:func:`seeded_state`); measured no better, so off by default
    (module docstring).
    """

    threshold: float = 0.5
    factor: float = 0.1
    use_movers: float = 1.0
    secant_cap: float = 1.0
    noise_floor: float = 1.0
    exit_after: float = 6.0
    hold_p: float = 0.0
    cycle_ratio: float = 0.2
    cycle_decay: float = 0.8
    hold_column: float = 0.0
    cycle_min: float = SECANT_MIN_CHANGE
    calm: float = 0.0
    name: str = "split"

    def __post_init__(self) -> None:
        if not 0.0 <= self.factor < 1.0:
            raise ValueError(f"factor must be in [0, 1), got {self.factor}")
        if not 0.0 <= self.hold_p <= 1.0:
            raise ValueError(f"hold_p must be in [0, 1], got {self.hold_p}")

    def initial_state(self, num_users: int) -> RuleState:
        nan = np.full(num_users, np.nan)
        arrays = {"gain": nan.copy(), "last_totals": nan.copy(), "last_column": nan.copy()}
        fill = {"gain": math.nan, "last_totals": math.nan, "last_column": math.nan}
        for j in range(MAX_STALENESS + 1):
            arrays[f"change{j}"] = np.zeros(num_users)
            fill[f"change{j}"] = 0.0
        for name in ("draining", "drained", "sagged", "net", "gross"):
            arrays[name] = np.zeros(num_users)
            fill[name] = 0.0
        return RuleState(arrays, fill)

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        col = feasible_column(view, column)
        tot = np.maximum(np.where(np.isfinite(totals), totals, 0.0), col)
        d = int(min(max(round(view.staleness), 0), MAX_STALENESS))
        # own changes, most recent first: change0 is the one made at the previous update
        history = [state.get(f"change{j}") for j in range(MAX_STALENESS + 1)]
        holders = np.ones(view.num_users) if view.holders is None else view.holders
        k = np.clip(holders, 1.0, max(view.num_servers, 1))
        reference = history[d]
        # Signed mover counts help with fresh totals but, measured, let a period-2 oscillation
        # build up when the others' columns lag by a further round: use holders there.
        signed = bool(
            self.use_movers and view.raising is not None and view.lowering is not None and d == 0
        )
        if signed and self.calm:
            # Near equilibrium the signs of tiny moves flip from round to round, and the
            # same-side count with them; the holder count does not (module docstring, "Calm";
            # off by default).
            moved = np.abs(history[0]) / np.maximum(tot, 1e-300)
            signed = float(moved.max(initial=0.0)) >= self.calm
        # The others' part of the total changed by what they did d + 1 updates ago; compare
        # with what this server did then.
        d_own = col - state.get("last_column")
        d_others = tot - state.get("last_totals") - d_own
        measurable = (
            np.isfinite(d_others)
            & np.isfinite(d_own)
            & (np.abs(reference) > SECANT_MIN_CHANGE * np.maximum(tot, 1e-300))
        )
        if signed:
            # the servers that moved n the way this server did, in the round the snapshot shows
            assert view.raising is not None and view.lowering is not None
            same = np.where(reference > 0, view.raising, view.lowering)
            if self.noise_floor:
                # a round-off move has no side
                same = np.where(measurable, same, holders)
            else:
                same = np.where(reference != 0, same, holders)
            k = np.clip(same, 1.0, max(view.num_servers, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = d_others / np.where(measurable, reference, 1.0) + 1.0
        gain = state.get("gain")
        gain = np.where(np.isfinite(gain), np.minimum(gain, k), k)
        opposed = measurable & (ratio < self.threshold)
        if signed:
            # with signed counts only leaving needs the cut (module docstring)
            opposed &= reference < 0
        restore = k
        if self.secant_cap and not signed and d > 0:
            restore = np.clip(np.where(measurable, ratio, k), 1.0, k)
        gain = np.where(opposed, np.maximum(1.0, gain * self.factor),
                        np.where(measurable, restore, gain))
        gain = np.where(view.gamma > 0, gain, 1.0)
        pending = np.sum(history[:d], axis=0) if d else np.zeros_like(col)
        predicted = np.maximum(tot + (gain - 1.0) * pending, col)
        # Plateau exit: a user this server has kept lowering at gain 1 (the total did not follow:
        # the other holders refill it) is valued as if its total were higher by the amount
        # drained so far, doubled every further round, so it leaves in a few rounds instead of
        # at the rate of its level gap.  Only on a marginal server (holding less than the
        # user's average share), only for a lone such user in the column (several at once are
        # a reallocation of the column), and never at a fixed point (nothing moves there).
        draining = measurable & (reference < 0) & (state.get("gain") <= 1.0) & (holders > 1)
        streak = np.where(draining, state.get("draining") + 1.0, 0.0)
        drained = np.where(draining, state.get("drained") - reference, 0.0)
        # how far the total fell over the streak, up to the first extrapolated round: a plateau
        # only if it fell by less than ``threshold`` of what this server drained (with few
        # holders, e.g. 2 servers, gain 1 is the signed count itself, not a cut)
        sagged = np.where(
            draining,
            state.get("sagged") - np.where(streak <= self.exit_after, reference + d_others, 0.0),
            0.0,
        )
        followed = (streak == self.exit_after) & (sagged > self.threshold * drained)
        streak = np.where(followed, 0.0, streak)
        if self.exit_after:
            boosted = (streak >= self.exit_after) & (col * holders < tot)
            if np.count_nonzero(boosted) > MAX_EXITS:
                boosted[:] = False
            boost = drained * np.exp2(np.minimum(streak - self.exit_after, 30.0))
            predicted = np.where(boosted, predicted + boost, predicted)
        # Cycle hold: a user whose own moves here cancel out (decayed net move small against
        # the decayed gross move) is held this round with probability ``hold_p``, on this
        # server's own coin, so identical servers caught in one cycle stop moving in step.
        # Holding is a huge gain (the water-fill barely moves the user): exact and feasible, and
        # nothing changes at a fixed point (nothing moves there).
        net = self.cycle_decay * state.get("net") + history[0]
        gross = self.cycle_decay * state.get("gross") + np.abs(history[0])
        solved_gain = gain
        if self.hold_p:
            cycling = (gross > self.cycle_min * np.maximum(tot, 1e-300)) & (
                np.abs(net) < self.cycle_ratio * gross
            )
            draws = state.coins(view.num_users)
            if self.hold_column:
                # one coin for the whole column: the server sits this round out
                held = np.full(view.num_users, bool(np.any(cycling)) and draws[0] < self.hold_p)
            else:
                held = cycling & (draws < self.hold_p)
            solved_gain = np.where(held, HOLD_GAIN, gain)
        new = best_response(view, predicted, col, gain=solved_gain)
        shifted = {f"change{j + 1}": history[j] for j in range(MAX_STALENESS)}
        return new, state.evolve(
            gain=gain, last_totals=tot, last_column=col, change0=new - col, draining=streak,
            drained=drained, sagged=sagged, net=net, gross=gross, **shifted,
        )


def _secant_state(num_users: int) -> RuleState:
    nan = np.full(num_users, np.nan)
    return RuleState(
        {"gain": np.ones(num_users), "last_totals": nan.copy(), "last_column": nan.copy()},
        {"gain": 1.0, "last_totals": math.nan, "last_column": math.nan},
    )


def _secant_gain(
    state: RuleState, view: ServerView, tot: FloatArray, col: FloatArray, smoothing: float
) -> tuple[FloatArray, dict[str, FloatArray]]:
    """Gain = (change of the gossiped total) / (own change) over the last update, clipped to
    [1, K] and smoothed in log space; the arrays to remember for the next estimate."""
    gain = state.get("gain")
    d_total = tot - state.get("last_totals")
    d_own = col - state.get("last_column")
    scale = np.maximum(tot, 1e-300)
    measurable = np.isfinite(d_own) & np.isfinite(d_total) & (
        np.abs(d_own) > SECANT_MIN_CHANGE * scale
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        secant = np.clip(d_total / np.where(measurable, d_own, 1.0), 1.0, max(view.num_servers, 1))
    log_gain = np.where(
        measurable, (1 - smoothing) * np.log(gain) + smoothing * np.log(secant), np.log(gain)
    )
    gain = np.where(view.gamma > 0, np.exp(log_gain), 1.0)
    return gain, {"gain": gain, "last_totals": tot, "last_column": col}


def _holders_gain(
    state: RuleState, view: ServerView, tot: FloatArray, col: FloatArray
) -> tuple[FloatArray, dict[str, FloatArray]]:
    if view.holders is None:
        return _secant_gain(state, view, tot, col, SECANT_SMOOTHING)
    gain = np.clip(np.asarray(view.holders, dtype=float), 1.0, max(view.num_servers, 1))
    return gain, {}


RuleFactory = Callable[..., UpdateRule]

_FACTORIES: dict[str, RuleFactory] = {
    "best-response": BestResponse,
    "damped": Damped,
    "predictive": PredictiveSecant,
    "holders": PredictiveHolders,
    "adaptive": HoldersAdaptive,
    "split": SplitGain,
}
RULES: tuple[str, ...] = tuple(_FACTORIES)
DEFAULT_RULE = "split"


def make_rule(name: str = DEFAULT_RULE, **params: float) -> UpdateRule:
    """Build a rule by name; ``params`` are its numeric parameters (e.g. ``a`` for damped)."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        choices = ", ".join(RULES)
        raise ValueError(f"unknown update rule {name!r}; choose one of {choices}") from None
    try:
        return factory(**params)
    except TypeError as err:
        raise ValueError(f"rule {name!r}: bad parameters {sorted(params)}: {err}") from None
