//! A host pool on paper: which hosts each server group runs on and when, as the runner
//! schedules them (plan order; a group starts once the hosts it needs are free: one, or
//! `server.nodes` for a multi-node server), from each group's estimated time. Gives `plan`
//! the assignment and the pool's estimated wall time.

/// One group's turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slot {
    pub group: String,
    /// Indices into the pool, rank 0 first.
    pub hosts: Vec<usize>,
    /// Estimated seconds from the run's start.
    pub start_s: f64,
    pub end_s: f64,
}

/// The schedule of a whole plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub slots: Vec<Slot>,
    /// When the last group ends.
    pub wall_s: f64,
    /// The sum of every group's time: the wall time on one host.
    pub serial_s: f64,
}

/// Why a plan cannot run on a pool.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum PoolError {
    #[error(
        "{group} needs {nodes} hosts (server.nodes) but the pool has {hosts}: list more hosts in `hosts:` or lower server.nodes"
    )]
    TooFewHosts {
        group: String,
        nodes: usize,
        hosts: usize,
    },
}

/// Schedules `groups` (id, hosts needed, estimated seconds), in order, on `hosts` hosts:
/// each group starts when its predecessor has started and the hosts it needs are free, on
/// those free first (lowest index on ties), as the runner does.
pub(crate) fn schedule(
    groups: &[(String, usize, f64)],
    hosts: usize,
) -> Result<Schedule, PoolError> {
    let mut free_at = vec![0.0_f64; hosts];
    let mut slots = Vec::with_capacity(groups.len());
    let mut last_start = 0.0_f64;
    for (group, nodes, seconds) in groups {
        let nodes = (*nodes).max(1);
        if nodes > hosts {
            return Err(PoolError::TooFewHosts {
                group: group.clone(),
                nodes,
                hosts,
            });
        }
        let mut order: Vec<usize> = (0..hosts).collect();
        order.sort_by(|a, b| free_at[*a].total_cmp(&free_at[*b]).then(a.cmp(b)));
        let mut chosen: Vec<usize> = order[..nodes].to_vec();
        chosen.sort_unstable();
        let start = chosen
            .iter()
            .map(|&i| free_at[i])
            .fold(last_start, f64::max);
        let end = start + seconds.max(0.0);
        for &i in &chosen {
            free_at[i] = end;
        }
        last_start = start;
        slots.push(Slot {
            group: group.clone(),
            hosts: chosen,
            start_s: start,
            end_s: end,
        });
    }
    Ok(Schedule {
        wall_s: slots.iter().map(|s| s.end_s).fold(0.0, f64::max),
        serial_s: groups.iter().map(|g| g.2.max(0.0)).sum(),
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(id: &str, nodes: usize, s: f64) -> (String, usize, f64) {
        (id.into(), nodes, s)
    }

    #[test]
    fn four_equal_groups_on_two_hosts_take_half_the_time() {
        let s = schedule(
            &[
                g("g1", 1, 10.0),
                g("g2", 1, 10.0),
                g("g3", 1, 10.0),
                g("g4", 1, 10.0),
            ],
            2,
        )
        .unwrap();
        assert_eq!(s.wall_s, 20.0);
        assert_eq!(s.serial_s, 40.0);
        let hosts: Vec<Vec<usize>> = s.slots.iter().map(|x| x.hosts.clone()).collect();
        assert_eq!(hosts, [vec![0], vec![1], vec![0], vec![1]]);
    }

    #[test]
    fn a_multi_node_group_waits_for_enough_free_hosts_and_order_is_kept() {
        let s = schedule(&[g("g1", 1, 30.0), g("g2", 2, 10.0), g("g3", 1, 1.0)], 2).unwrap();
        // g2 needs both hosts: it starts when g1 ends; g3 may not start before g2.
        assert_eq!((s.slots[1].start_s, s.slots[1].end_s), (30.0, 40.0));
        assert_eq!(s.slots[1].hosts, [0, 1]);
        assert_eq!(s.slots[2].start_s, 40.0);
        assert_eq!(s.wall_s, 41.0);
        assert_eq!(
            schedule(&[g("g1", 3, 1.0)], 2),
            Err(PoolError::TooFewHosts {
                group: "g1".into(),
                nodes: 3,
                hosts: 2
            })
        );
    }

    #[test]
    fn a_later_group_does_not_start_before_an_earlier_one() {
        // Host 1 is free at once, but g2 needs both hosts; g3 (one host) must wait for it.
        let s = schedule(&[g("g1", 1, 10.0), g("g2", 2, 5.0), g("g3", 1, 1.0)], 2).unwrap();
        assert_eq!(s.slots[2].start_s, 15.0);
    }
}
