package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	tc "github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The images the containers provider runs unless FENCELOCK_ETCD_IMAGE or
// FENCELOCK_ZK_IMAGE name others. Machines without registry access build
// fencelock-etcd:local and fencelock-zookeeper:local with
// integration/images/build.sh and set the variables to those names.
const (
	DefaultEtcdImage      = "gcr.io/etcd-development/etcd:v3.6.16"
	DefaultZooKeeperImage = "zookeeper:3.8"
)

func init() { containersProvider = ContainersProvider }

// ContainersProvider returns the provider that runs each server in its own
// Docker container through testcontainers-go.
//
// Every container uses host networking and binds 127.0.0.1 ports chosen
// free on the host; nothing is port-mapped and no bridge is needed. The
// etcd image must hold the server at /usr/local/bin/etcd (as the official
// one does). The ZooKeeper image must accept the official image's
// interface: "zkServer.sh start-foreground" reading /conf/zoo.cfg, with
// ZOO_MY_ID naming the server and JVMFLAGS passed to java; the provider
// copies its own zoo.cfg (the same settings as the process provider, data
// in /data inside the container) before starting.
//
// A member's data lives in its container, so Kill (docker kill) followed by
// Restart (docker start) keeps both its data and its ports; Stop and
// Continue are docker pause and unpause. Teardown removes every container,
// with its volumes, by ID in t.Cleanup, also when the test fails, and then
// prints the tail of each member's log.
//
// The Ryuk reaper that testcontainers-go would otherwise pull is not used:
// if TESTCONTAINERS_RYUK_DISABLED is unset, the provider sets it to "true"
// in the process environment before its first Docker call. When the Docker
// engine cannot be reached, or an image is neither present nor pullable,
// the test fails under CI=true and is skipped otherwise.
func ContainersProvider() Provider { return ctrProvider{} }

type ctrProvider struct{}

func (ctrProvider) Name() string { return "containers" }

// ctrOpTimeout bounds one Docker call made by a member method or teardown.
const ctrOpTimeout = time.Minute

// ctrPullTimeout bounds the pull of a missing image.
const ctrPullTimeout = 10 * time.Minute

// ctrZKJVMFlags keeps the three JVMs small, as the process provider does.
const ctrZKJVMFlags = "-Xmx256m -Xms32m -Xss512k -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -Djava.net.preferIPv4Stack=true"

func (p ctrProvider) Start(t testing.TB, kind Kind, opts ...Option) *Cluster {
	t.Helper()
	SkipUnlessRequested(t, kind)
	o, err := buildOptions(opts)
	if err != nil {
		t.Fatalf("cluster: start %s: %v", kind, err)
	}
	if o.peerCuts {
		t.Fatalf("cluster: start %s: WithPeerCuts needs the process provider (a container's processes are not in a cgroup the harness controls)", kind)
	}
	var image, imageVar string
	switch kind {
	case Etcd:
		imageVar, image = "FENCELOCK_ETCD_IMAGE", DefaultEtcdImage
	case ZooKeeper:
		imageVar, image = "FENCELOCK_ZK_IMAGE", DefaultZooKeeperImage
	default:
		t.Fatalf("cluster: start %q: unknown kind; want %q or %q", kind, Etcd, ZooKeeper)
	}
	if v := strings.TrimSpace(os.Getenv(imageVar)); v != "" {
		image = v
	}
	ctrDisableRyuk()

	connCtx, cancelConn := context.WithTimeout(context.Background(), ctrOpTimeout)
	defer cancelConn()
	cli, err := ctrDockerClient(connCtx)
	if err != nil {
		Unavailable(t, "cluster: containers provider: the Docker engine is not reachable: %v (start dockerd, or run with FENCELOCK_PROVIDER=process)", err)
	}
	// Registered first, so it runs after the containers are gone.
	t.Cleanup(func() { cli.Close() })
	ctrOrphansOnce.Do(func() { ctrRemoveOrphans(connCtx, t, cli) })
	pullCtx, cancelPull := context.WithTimeout(context.Background(), ctrPullTimeout)
	err = ctrEnsureImage(pullCtx, cli, image)
	cancelPull()
	if err != nil {
		Unavailable(t, "cluster: containers provider: image %s: %v (without registry access, build local images with integration/images/build.sh and set %s=fencelock-%s:local)", image, err, imageVar, kind)
	}

	// The default network of this provider is the host network: left to
	// itself, testcontainers-go would attach every container to the
	// "bridge" network, or create a "reaper_default" bridge network when the
	// engine has none.
	prov, err := tc.NewDockerProvider(tc.WithDefaultBridgeNetwork("host"), tc.WithLogger(tclog.TestLogger(t)))
	if err != nil {
		Unavailable(t, "cluster: containers provider: %v", err)
	}
	t.Cleanup(func() { prov.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	for attempt := 1; ; attempt++ {
		begin := time.Now()
		c, err := ctrStartCluster(ctx, t, cli, prov, kind, image, o)
		if err == nil {
			t.Logf("cluster: %s cluster of %d (%s) started in %v: %s", kind, o.members, image, time.Since(begin).Round(time.Millisecond), strings.Join(c.Endpoints(), ","))
			return c
		}
		if errors.Is(err, errPortInUse) && attempt < startAttempts {
			t.Logf("cluster: start %s (attempt %d): %v; retrying on other ports", kind, attempt, err)
			continue
		}
		if isEngineHiccup(err) && attempt < startAttempts {
			// The request to the engine failed, not a container: once,
			// with tests starting clusters in parallel, the engine
			// client's connection broke under a container start
			// ("http: CloseIdleConnections called").
			t.Logf("cluster: start %s (attempt %d): the Docker engine request failed: %v; retrying", kind, attempt, err)
			continue
		}
		t.Fatalf("cluster: start %s in containers: %v", kind, err)
	}
}

// isEngineHiccup reports whether err is the Docker client's failure to
// reach the engine ("error during connect"), which says nothing about the
// containers; ctrStartCluster has removed what it created.
func isEngineHiccup(err error) bool {
	return err != nil && strings.Contains(err.Error(), "error during connect")
}

var ctrRyukOnce sync.Once

// ctrDisableRyuk sets TESTCONTAINERS_RYUK_DISABLED=true unless the user set
// it: the reaper image cannot be pulled without registry access, and the
// provider removes its containers itself. testcontainers-go reads its
// configuration once, so this must happen before the first call into it.
func ctrDisableRyuk() {
	ctrRyukOnce.Do(func() {
		if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
			os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
	})
}

// ctrDockerClient connects to the Docker engine testcontainers-go selects
// (DOCKER_HOST, ~/.testcontainers.properties, the default socket) and
// checks that it answers.
func ctrDockerClient(ctx context.Context) (cli *tc.DockerClient, err error) {
	defer func() {
		// Some lookups of the Docker host panic when none is found.
		if r := recover(); r != nil {
			cli, err = nil, fmt.Errorf("no Docker host: %v", r)
		}
	}()
	cli, err = tc.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// Labels naming the test process that owns a container.
const (
	ctrLabelHost = "fencelock.host"
	ctrLabelPID  = "fencelock.pid"
)

func ctrHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

var ctrOrphansOnce sync.Once

// ctrRemoveOrphans removes the containers left behind by test processes of
// this host that have died without running their cleanups (a test binary
// killed on timeout, say): without the Ryuk reaper nothing else would.
// Containers of processes still alive are left alone.
func ctrRemoveOrphans(ctx context.Context, t testing.TB, cli *tc.DockerClient) {
	t.Helper()
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", ctrLabelHost+"="+ctrHostname()),
	})
	if err != nil {
		t.Logf("cluster: list containers of earlier test runs: %v", err)
		return
	}
	for _, c := range res.Items {
		pid, err := strconv.Atoi(c.Labels[ctrLabelPID])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to judge
		}
		_, err = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("cluster: remove container %.12s left by dead test process %d: %v", c.ID, pid, err)
			continue
		}
		t.Logf("cluster: removed container %.12s left by dead test process %d", c.ID, pid)
	}
}

// ctrImages remembers the images found or pulled in this process, so that
// a missing image costs one pull attempt, not one per test.
var ctrImages sync.Map // image name -> error (nil when present)

// ctrEnsureImage makes sure image is present, pulling it once if needed.
func ctrEnsureImage(ctx context.Context, cli *tc.DockerClient, image string) error {
	if v, ok := ctrImages.Load(image); ok {
		err, _ := v.(error)
		return err
	}
	_, err := cli.ImageInspect(ctx, image)
	if err != nil {
		var resp client.ImagePullResponse
		resp, err = cli.ImagePull(ctx, image, client.ImagePullOptions{})
		if err == nil {
			err = resp.Wait(ctx)
			resp.Close()
		}
		if err != nil {
			err = fmt.Errorf("not present and not pullable: %w", err)
		}
	}
	if ctx.Err() == nil {
		ctrImages.Store(image, err)
	}
	return err
}

// ctrStartCluster creates and starts the containers of one cluster and
// waits until it is healthy. On error every container it created has been
// removed and its ports released.
func ctrStartCluster(ctx context.Context, t testing.TB, cli *tc.DockerClient, prov *tc.DockerProvider, kind Kind, image string, o options) (*Cluster, error) {
	perMember := 2 // etcd: client, peer
	if kind == ZooKeeper {
		perMember = 3 + zkSecurePorts(o) // client, quorum, election[, secure client]
	}
	binds, err := zkSecureBinds(o)
	if err != nil {
		return nil, err
	}
	if kind == Etcd {
		binds = append(binds, etcdSecBinds(o)...)
	}
	lease, err := reserveLoopbackPorts(o.members * perMember)
	if err != nil {
		return nil, err
	}
	ports := make([][]int, o.members)
	for i := range ports {
		ports[i] = lease.ports[i*perMember : (i+1)*perMember]
	}
	token := randomToken()

	var members []*ctrMember
	teardown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), ctrOpTimeout)
		defer cancel()
		var errs []error
		for _, m := range members {
			errs = append(errs, m.remove(ctx))
		}
		lease.close()
		if err := errors.Join(errs...); err != nil {
			t.Errorf("cluster: remove %s containers: %v", kind, err)
		}
	}
	for i := range o.members {
		name := fmt.Sprintf("%s-%d", shortKind(kind), i+1)
		req := tc.ContainerRequest{
			Image: image,
			Name:  fmt.Sprintf("fencelock-%s-%s", token, name),
			Labels: map[string]string{
				"fencelock.cluster": token,
				"fencelock.member":  name,
				ctrLabelHost:        ctrHostname(),
				ctrLabelPID:         strconv.Itoa(os.Getpid()),
			},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.NetworkMode = "host"
				hc.Binds = append(hc.Binds, binds...)
			},
			WaitingFor: ctrDial{addr: fmt.Sprintf("127.0.0.1:%d", ports[i][0])},
		}
		if kind == Etcd {
			req.Entrypoint = []string{"/usr/local/bin/etcd"}
			req.Cmd = ctrEtcdArgs(i, ports, token, o)
		} else {
			req.Env = map[string]string{
				"ZOO_MY_ID": fmt.Sprint(i + 1),
				"JVMFLAGS":  strings.Join(append([]string{ctrZKJVMFlags}, juteFlags(o)...), " "),
			}
			req.Cmd = []string{"zkServer.sh", "start-foreground"}
			req.Files = []tc.ContainerFile{{
				Reader:            strings.NewReader(ctrZooCfg(i, ports, o)),
				ContainerFilePath: "/conf/zoo.cfg",
				FileMode:          0o644,
			}}
		}
		ctr, err := prov.CreateContainer(ctx, req)
		if ctr != nil {
			members = append(members, &ctrMember{
				name:       name,
				kind:       kind,
				clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[i][0]),
				cli:        cli,
				ctr:        ctr,
			})
		}
		if err == nil {
			err = members[len(members)-1].checkHostNetwork(ctx)
		}
		if err != nil {
			teardown()
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
	}

	// The servers of a new cluster wait for each other, so they start
	// together; each Start returns once its client port accepts.
	lease.unhold()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { errs[i] = m.ctr.Start(ctx) })
	}
	wg.Wait()
	for i, m := range members {
		if errs[i] != nil {
			err := fmt.Errorf("start %s: %w; last lines of its log:\n%s", m.name, errs[i], ctrTail(m.Logs(), 40))
			if isAddrInUse(m.Logs()) {
				err = fmt.Errorf("%s: %w: %w", m.name, errPortInUse, errs[i])
			}
			teardown()
			return nil, err
		}
	}

	iface := make([]Member, len(members))
	for i, m := range members {
		iface[i] = m
	}
	c := &Cluster{Kind: kind, Members: iface, impl: newMemberHealth(kind, iface)}
	c.secureEndpoints = zkSecureAddrs(kind, o, ports)
	if err := ctrWaitStarted(ctx, c, members); err != nil {
		teardown()
		return nil, err
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range members {
				t.Logf("cluster: last %d lines of %s (%s, container %.12s):\n%s", logTailLines, m.name, m.clientAddr, m.ctr.GetContainerID(), ctrTail(m.Logs(), logTailLines))
			}
		}
		teardown()
	})
	return c, nil
}

// ctrWaitStarted waits until c is healthy, failing early when a container
// exits.
func ctrWaitStarted(ctx context.Context, c *Cluster, members []*ctrMember) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	h := c.impl.(*memberHealth)
	for {
		for _, m := range members {
			st, err := m.state(ctx)
			if err == nil && !st.Running {
				out := m.Logs()
				if isAddrInUse(out) {
					return fmt.Errorf("%s exited: %w", m.name, errPortInUse)
				}
				return fmt.Errorf("%s exited during start (status %s, exit code %d); last lines of its log:\n%s", m.name, st.Status, st.ExitCode, ctrTail(out, 40))
			}
		}
		_, err := h.check(ctx, true)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy after %v: %w", startTimeout, err)
		case <-tick.C:
		}
	}
}

// ctrEtcdArgs returns the etcd flags of member i, the same as the process
// provider's apart from the data directory, which is inside the container.
func ctrEtcdArgs(i int, ports [][]int, token string, o options) []string {
	var initial []string
	for j, p := range ports {
		initial = append(initial, fmt.Sprintf("etcd-%d=%s://127.0.0.1:%d", j+1, etcdScheme(o), p[1]))
	}
	clientURL := fmt.Sprintf("%s://127.0.0.1:%d", etcdScheme(o), ports[i][0])
	peerURL := fmt.Sprintf("%s://127.0.0.1:%d", etcdScheme(o), ports[i][1])
	args := []string{
		"--name", fmt.Sprintf("etcd-%d", i+1),
		"--data-dir", "/var/lib/etcd/data",
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "fencelock-" + token,
		"--heartbeat-interval", "100",
		"--election-timeout", "1000",
		"--log-outputs", "stdout",
	}
	args = append(args, etcdSecArgs(o, fmt.Sprintf("127.0.0.1:%d", ports[i][0]))...)
	return append(args, o.etcdArgs...)
}

// ctrZooCfg returns server i's zoo.cfg: the process provider's settings,
// with the data directory inside the container.
func ctrZooCfg(i int, ports [][]int, o options) string {
	ticks := func(d time.Duration, least int) int {
		return max(int((d+o.tickTime-1)/o.tickTime), least)
	}
	tick := o.tickTime.Milliseconds()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "tickTime=%d\n", tick)
	fmt.Fprintf(&cfg, "initLimit=%d\n", ticks(5*time.Second, 2))
	fmt.Fprintf(&cfg, "syncLimit=%d\n", ticks(2*time.Second, 2))
	fmt.Fprintf(&cfg, "dataDir=/data\n")
	fmt.Fprintf(&cfg, "clientPort=%d\n", ports[i][0])
	fmt.Fprintf(&cfg, "clientPortAddress=127.0.0.1\n")
	fmt.Fprintf(&cfg, "minSessionTimeout=%d\n", 2*tick)
	fmt.Fprintf(&cfg, "maxSessionTimeout=%d\n", o.maxSessionTime.Milliseconds())
	fmt.Fprintf(&cfg, "admin.enableServer=false\n")
	fmt.Fprintf(&cfg, "4lw.commands.whitelist=*\n")
	fmt.Fprintf(&cfg, "reconfigEnabled=false\n")
	fmt.Fprintf(&cfg, "preAllocSize=4096\n")
	if o.maxClientConns >= 0 {
		fmt.Fprintf(&cfg, "maxClientCnxns=%d\n", o.maxClientConns)
	}
	if len(ports) > 1 {
		for j, p := range ports {
			fmt.Fprintf(&cfg, "server.%d=127.0.0.1:%d:%d\n", j+1, p[1], p[2])
		}
	}
	cfg.WriteString(zkSecureCfg(o, ports[i]))
	return cfg.String()
}

// ctrDial is the wait strategy of every container: with host networking
// there are no mapped ports to wait for, so it dials the server's client
// port on 127.0.0.1 until it accepts, giving up if the container exits.
type ctrDial struct{ addr string }

func (d ctrDial) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var dialer net.Dialer
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := dialer.DialContext(dctx, "tcp", d.addr)
		cancel()
		if err == nil {
			conn.Close()
			return nil
		}
		if st, serr := target.State(ctx); serr == nil && !st.Running {
			return fmt.Errorf("container exited (status %s, exit code %d) before %s accepted connections", st.Status, st.ExitCode, d.addr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not accept connections: %w: %w", d.addr, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// ctrMember is one server container. It implements Member; every method
// asks the Docker engine, so it is safe for concurrent use.
type ctrMember struct {
	name       string
	kind       Kind
	clientAddr string
	cli        *tc.DockerClient
	ctr        tc.Container
}

func (m *ctrMember) Name() string       { return m.name }
func (m *ctrMember) ClientAddr() string { return m.clientAddr }

func (m *ctrMember) state(ctx context.Context) (*container.State, error) {
	res, err := m.cli.ContainerInspect(ctx, m.ctr.GetContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	if res.Container.State == nil {
		return nil, fmt.Errorf("container %.12s has no state", m.ctr.GetContainerID())
	}
	return res.Container.State, nil
}

// checkHostNetwork makes sure the container uses the host network and no
// other: servers must be reachable on 127.0.0.1 only, through no bridge.
func (m *ctrMember) checkHostNetwork(ctx context.Context) error {
	res, err := m.cli.ContainerInspect(ctx, m.ctr.GetContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		return err
	}
	c := res.Container
	if c.HostConfig == nil || c.HostConfig.NetworkMode != "host" {
		return fmt.Errorf("container %.12s is not on the host network", m.ctr.GetContainerID())
	}
	if c.NetworkSettings != nil {
		for name := range c.NetworkSettings.Networks {
			if name != "host" {
				return fmt.Errorf("container %.12s is attached to network %q", m.ctr.GetContainerID(), name)
			}
		}
	}
	return nil
}

// Kill kills the container (docker kill; a paused one too) and waits until
// the engine reports it stopped. The container and its data are kept for
// Restart. Killing a member that is not running does nothing.
func (m *ctrMember) Kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), ctrOpTimeout)
	defer cancel()
	st, err := m.state(ctx)
	if err != nil {
		return fmt.Errorf("cluster: kill %s: %w", m.name, err)
	}
	if !st.Running {
		return nil
	}
	if _, err := m.cli.ContainerKill(ctx, m.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("cluster: kill %s: %w", m.name, err)
	}
	return m.waitState(ctx, "kill", func(st *container.State) bool { return !st.Running })
}

// Stop freezes the container (docker pause) and waits until the engine
// reports it paused.
func (m *ctrMember) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), ctrOpTimeout)
	defer cancel()
	if _, err := m.cli.ContainerPause(ctx, m.ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("cluster: stop %s: %w", m.name, err)
	}
	return m.waitState(ctx, "stop", func(st *container.State) bool { return st.Paused })
}

// Continue resumes a container frozen by Stop (docker unpause).
func (m *ctrMember) Continue() error {
	ctx, cancel := context.WithTimeout(context.Background(), ctrOpTimeout)
	defer cancel()
	if _, err := m.cli.ContainerUnpause(ctx, m.ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("cluster: continue %s: %w", m.name, err)
	}
	return m.waitState(ctx, "continue", func(st *container.State) bool { return st.Running && !st.Paused })
}

// waitState polls the container's state until ok says it is reached.
func (m *ctrMember) waitState(ctx context.Context, op string, ok func(*container.State) bool) error {
	for {
		st, err := m.state(ctx)
		if err != nil {
			return fmt.Errorf("cluster: %s %s: %w", op, m.name, err)
		}
		if ok(st) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s %s: container still %s: %w", op, m.name, st.Status, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Restart starts the killed container again (docker start): same command
// line, ports and data. It returns once the member answers as part of a
// working cluster, and gives up early if the container exits.
func (m *ctrMember) Restart(ctx context.Context) error {
	st, err := m.state(ctx)
	if err != nil {
		return fmt.Errorf("cluster: restart %s: %w", m.name, err)
	}
	if st.Running {
		return fmt.Errorf("cluster: restart %s: already running", m.name)
	}
	if _, err := m.cli.ContainerStart(ctx, m.ctr.GetContainerID(), client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("cluster: restart %s: %w", m.name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan error, 1)
	go func() { answered <- memberAnswers(ctx, m.kind, m.clientAddr) }()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-answered:
			if err != nil {
				return fmt.Errorf("cluster: restart %s: %w", m.name, err)
			}
			return nil
		case <-tick.C:
			if st, err := m.state(ctx); err == nil && !st.Running {
				cancel()
				<-answered
				return fmt.Errorf("cluster: restart %s: container exited (status %s, exit code %d); last lines of its log:\n%s", m.name, st.Status, st.ExitCode, ctrTail(m.Logs(), 40))
			}
		}
	}
}

// Running reports whether the container is running and not paused.
func (m *ctrMember) Running() bool {
	ctx, cancel := context.WithTimeout(context.Background(), ctrOpTimeout)
	defer cancel()
	st, err := m.state(ctx)
	return err == nil && st.Running && !st.Paused
}

// Logs returns the container's output so far (stdout and stderr), or a
// line saying why it could not be read.
func (m *ctrMember) Logs() string {
	ctx, cancel := context.WithTimeout(context.Background(), ctrOpTimeout)
	defer cancel()
	rc, err := m.ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(cannot read the log of container %.12s: %v)\n", m.ctr.GetContainerID(), err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return string(b) + fmt.Sprintf("\n(reading the log of container %.12s: %v)\n", m.ctr.GetContainerID(), err)
	}
	return string(b)
}

// remove removes the container, running, paused or not, with its anonymous
// volumes. A container already gone is not an error.
func (m *ctrMember) remove(ctx context.Context) error {
	_, err := m.cli.ContainerRemove(ctx, m.ctr.GetContainerID(), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%s (container %.12s): %w", m.name, m.ctr.GetContainerID(), err)
	}
	return nil
}

// ctrTail returns the last n lines of s ("" for an empty s).
func ctrTail(s string, n int) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	return lastLines(s, n)
}
