package telemetrytest

// What record exports, twice, by TestExport's case.
const (
	wantEtcd = `github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=etcd,fencelock.kind=exclusive,fencelock.outcome=granted} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=etcd,fencelock.kind=exclusive,fencelock.outcome=locked} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=etcd,fencelock.kind=permit,fencelock.outcome=cancelled} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=etcd,fencelock.kind=permit,fencelock.outcome=error} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=etcd,fencelock.kind=permit,fencelock.outcome=lost} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=etcd,fencelock.kind=shared,fencelock.outcome=granted} count=8 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=etcd,fencelock.kind=exclusive} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=etcd,fencelock.kind=permit} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=etcd,fencelock.kind=shared} 0
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.backend=etcd,fencelock.change=elected} 4
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.backend=etcd,fencelock.change=ended} 4
github.com/fencelock/fencelock fencelock.election.leader {leader} monotonic=false {fencelock.backend=etcd} 0
github.com/fencelock/fencelock fencelock.fencing.decisions {decision} monotonic=true {fencelock.backend=etcd,fencelock.decision=accepted,fencelock.helper=guard} 4
github.com/fencelock/fencelock fencelock.fencing.decisions {decision} monotonic=true {fencelock.backend=etcd,fencelock.decision=rejected,fencelock.helper=sqlfence} 4
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.backend=etcd,fencelock.kind=exclusive} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.backend=etcd,fencelock.kind=shared} count=8 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.backend=etcd,fencelock.kind=exclusive} 0
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.backend=etcd,fencelock.kind=shared} 0
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.backend=etcd,fencelock.kind=shared,fencelock.reason=closed} 4
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.backend=etcd,fencelock.kind=shared,fencelock.reason=expired} 4
github.com/fencelock/fencelock fencelock.session.ends {session} monotonic=true {fencelock.backend=etcd,fencelock.reason=closed} 2
github.com/fencelock/fencelock fencelock.session.ends {session} monotonic=true {fencelock.backend=etcd,fencelock.reason=disconnected} 2
github.com/fencelock/fencelock fencelock.session.starts {session} monotonic=true {fencelock.backend=etcd} 2
`
	wantZooKeeperMapped = `github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=exclusive,fencelock.lock=m-orders,fencelock.outcome=granted} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=exclusive,fencelock.lock=m-orders,fencelock.outcome=locked} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=exclusive,fencelock.outcome=granted} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=exclusive,fencelock.outcome=locked} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=permit,fencelock.lock=m-orders,fencelock.outcome=cancelled} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=permit,fencelock.lock=m-orders,fencelock.outcome=error} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=permit,fencelock.lock=m-orders,fencelock.outcome=lost} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=permit,fencelock.outcome=cancelled} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=permit,fencelock.outcome=error} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=permit,fencelock.outcome=lost} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.lock=m-orders,fencelock.outcome=granted} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.outcome=granted} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=exclusive,fencelock.lock=m-orders} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=exclusive} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=permit,fencelock.lock=m-orders} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=permit} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.lock=m-orders} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=shared} 0
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.backend=zookeeper,fencelock.change=elected,fencelock.election=m-orders} 2
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.backend=zookeeper,fencelock.change=elected} 2
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.backend=zookeeper,fencelock.change=ended,fencelock.election=m-orders} 2
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.backend=zookeeper,fencelock.change=ended} 2
github.com/fencelock/fencelock fencelock.election.leader {leader} monotonic=false {fencelock.backend=zookeeper,fencelock.election=m-orders} 0
github.com/fencelock/fencelock fencelock.election.leader {leader} monotonic=false {fencelock.backend=zookeeper} 0
github.com/fencelock/fencelock fencelock.fencing.decisions {decision} monotonic=true {fencelock.backend=zookeeper,fencelock.decision=accepted,fencelock.helper=guard} 4
github.com/fencelock/fencelock fencelock.fencing.decisions {decision} monotonic=true {fencelock.backend=zookeeper,fencelock.decision=rejected,fencelock.helper=sqlfence} 4
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.backend=zookeeper,fencelock.kind=exclusive,fencelock.lock=m-orders} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.backend=zookeeper,fencelock.kind=exclusive} count=2 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.lock=m-orders} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.backend=zookeeper,fencelock.kind=shared} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=exclusive,fencelock.lock=m-orders} 0
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=exclusive} 0
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.lock=m-orders} 0
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.backend=zookeeper,fencelock.kind=shared} 0
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.lock=m-orders,fencelock.reason=closed} 2
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.lock=m-orders,fencelock.reason=expired} 2
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.reason=closed} 2
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.backend=zookeeper,fencelock.kind=shared,fencelock.reason=expired} 2
github.com/fencelock/fencelock fencelock.session.ends {session} monotonic=true {fencelock.backend=zookeeper,fencelock.reason=closed} 2
github.com/fencelock/fencelock fencelock.session.ends {session} monotonic=true {fencelock.backend=zookeeper,fencelock.reason=disconnected} 2
github.com/fencelock/fencelock fencelock.session.starts {session} monotonic=true {fencelock.backend=zookeeper} 2
`
	wantNoBackend = `github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.kind=exclusive,fencelock.outcome=granted} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.kind=exclusive,fencelock.outcome=locked} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.kind=permit,fencelock.outcome=cancelled} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.kind=permit,fencelock.outcome=error} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.kind=permit,fencelock.outcome=lost} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquire.duration s {fencelock.kind=shared,fencelock.outcome=granted} count=8 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.kind=exclusive} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.kind=permit} 0
github.com/fencelock/fencelock fencelock.acquisitions.waiting {acquisition} monotonic=false {fencelock.kind=shared} 0
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.change=elected} 4
github.com/fencelock/fencelock fencelock.election.changes {change} monotonic=true {fencelock.change=ended} 4
github.com/fencelock/fencelock fencelock.election.leader {leader} monotonic=false {} 0
github.com/fencelock/fencelock fencelock.fencing.decisions {decision} monotonic=true {fencelock.decision=accepted,fencelock.helper=guard} 4
github.com/fencelock/fencelock fencelock.fencing.decisions {decision} monotonic=true {fencelock.decision=rejected,fencelock.helper=sqlfence} 4
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.kind=exclusive} count=4 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.hold.duration s {fencelock.kind=shared} count=8 bounds=[0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600]
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.kind=exclusive} 0
github.com/fencelock/fencelock fencelock.leases.held {lease} monotonic=false {fencelock.kind=shared} 0
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.kind=shared,fencelock.reason=closed} 4
github.com/fencelock/fencelock fencelock.leases.lost {lease} monotonic=true {fencelock.kind=shared,fencelock.reason=expired} 4
github.com/fencelock/fencelock fencelock.session.ends {session} monotonic=true {fencelock.reason=closed} 2
github.com/fencelock/fencelock fencelock.session.ends {session} monotonic=true {fencelock.reason=disconnected} 2
github.com/fencelock/fencelock fencelock.session.starts {session} monotonic=true {} 2
`
)
