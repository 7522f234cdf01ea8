//! The share of long-running requests each replica holds, kept even: once a second, a ready
//! replica holding more than its share asks some of its followed watches to move (`watch`
//! moves them live, from the client's last position, onto the replica the balancer picks).
//!
//! Placement alone cannot even it out: after a rolling restart the replica restarted last
//! holds no watch until its clients' watches end, and the next restart then moves twice as
//! many (10,000 watches sat 4,857 / 5,143 / 0; docs/failover.md, Scale). Moves are paced by
//! `terminate.watch_moves_per_second`, so a returning replica's cache and etcd are not
//! stampeded, and only a replica clearly above the mean gives any up, so the share settles
//! rather than churns.
//!
//! A replica the operator drained ahead of a planned restart (`kubegate drain`) gives up
//! every watch it holds, first and at the same pace, so that the restart moves nothing.

use crate::state::{Gateway, Pool};
use kubegate_health::BackendState;
use std::sync::Arc;
use std::time::Duration;

/// How often the share is looked at (and the moves asked per second are spent).
const TICK: Duration = Duration::from_secs(1);
/// A replica whose watch cache said it lags its etcd this recently is left out of the share:
/// watches moved to it would only come back. (One that answered 410 stays in: it started
/// after some positions, and a move freshens an old position before it goes.)
const BEHIND_LATELY: Duration = Duration::from_secs(30);
/// A replica gives watches up when it holds more than this times the mean...
const TOLERANCE: f64 = 1.1;
/// ...and at least this many more than the mean (small counts are not worth a move).
const MIN_EXCESS: usize = 2;

/// Keeps the share of long-running requests even across the ready replicas of `pool` (one
/// cluster's), for ever.
pub async fn keep(gw: Arc<Gateway>, pool: Arc<Pool>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let budget = gw.config().load().terminate.watch_moves_per_second as usize;
        let backends = pool.backends();
        let mut moves = vec![0; backends.len()];
        // Drained by the operator: everything goes, before any evening out (unless every
        // ready replica is drained: there is nowhere better to go).
        let mut left = budget;
        let elsewhere = !pool.routing().undrained.is_empty();
        for (i, b) in backends.iter().enumerate() {
            if elsewhere && b.drained_by_operator() {
                let n = b.planes().terminate.long_running().min(left);
                moves[i] = n;
                left -= n;
            }
        }
        // A draining replica's watches move by the drain; one that is not ready holds
        // nothing new; nor does one whose cache fell behind lately. None of them counts
        // toward the share.
        let sharing: Vec<usize> = (0..backends.len())
            .filter(|&i| {
                let b = &backends[i];
                b.state() == BackendState::Ready
                    && !b.shutting_down()
                    && !b.drained_by_operator()
                    && !b.planes().terminate.cache_fell_behind_within(BEHIND_LATELY)
            })
            .collect();
        let holding: Vec<usize> = sharing
            .iter()
            .map(|&i| backends[i].planes().terminate.long_running_staying())
            .collect();
        for (&i, n) in sharing.iter().zip(plan(&holding, left)) {
            moves[i] = n;
        }
        for (b, n) in backends.iter().zip(moves) {
            b.planes().terminate.ask_moves(n);
        }
    }
}

/// How many long-running requests each replica should give up now, given how many each
/// holds: a replica above `TOLERANCE` × the mean and at least `MIN_EXCESS` above it gives up
/// what it holds above the mean (rounded up), at most `budget` over all replicas.
pub fn plan(holding: &[usize], budget: usize) -> Vec<usize> {
    let mut moves = vec![0; holding.len()];
    if holding.len() < 2 {
        return moves;
    }
    let total: usize = holding.iter().sum();
    let mean = total as f64 / holding.len() as f64;
    let share = mean.ceil() as usize;
    let mut left = budget;
    for (i, &h) in holding.iter().enumerate() {
        if (h as f64) > mean * TOLERANCE && h >= share + MIN_EXCESS {
            let n = (h - share).min(left);
            moves[i] = n;
            left -= n;
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_back_from_a_restart_gets_its_share_from_those_above_it() {
        // After a rolling restart: 4857 / 5143 / 0, mean 3333.3, share 3334.
        assert_eq!(plan(&[4857, 5143, 0], 10_000), vec![1523, 1809, 0]);
        // Paced: the budget is spent in order.
        assert_eq!(plan(&[4857, 5143, 0], 20), vec![20, 0, 0]);
    }

    #[test]
    fn an_even_or_nearly_even_share_is_left_alone() {
        assert_eq!(plan(&[10, 10, 10], 20), vec![0, 0, 0]);
        // 11 of mean 10: within the tolerance.
        assert_eq!(plan(&[11, 10, 9], 20), vec![0, 0, 0]);
        // Small counts: one watch more than the mean is not worth a move.
        assert_eq!(plan(&[3, 0], 20), vec![0, 0]);
        assert_eq!(plan(&[4, 0], 20), vec![2, 0]);
    }

    #[test]
    fn nothing_moves_with_one_replica_or_no_budget() {
        assert_eq!(plan(&[100], 20), vec![0]);
        assert_eq!(plan(&[], 20), Vec::<usize>::new());
        assert_eq!(plan(&[100, 0], 0), vec![0, 0]);
    }
}
