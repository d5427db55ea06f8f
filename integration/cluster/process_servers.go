package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// etcdBinary returns the etcd server to run: FENCELOCK_ETCD_BIN, else the
// one "make deps" builds.
func etcdBinary() (string, error) {
	if p := os.Getenv("FENCELOCK_ETCD_BIN"); p != "" {
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("etcd binary not found: FENCELOCK_ETCD_BIN=%s: %w (unset it to use the one \"make deps\" builds)", p, err)
		}
		return p, nil
	}
	root := repoRoot()
	if root == "" {
		return "", errors.New("etcd binary not found: cannot locate the repository root; set FENCELOCK_ETCD_BIN")
	}
	p := filepath.Join(root, "integration", ".cache", "bin", "etcd")
	if err := isExecutable(p); err != nil {
		return "", fmt.Errorf("etcd binary not found at %s (run \"make deps\" in %s, or set FENCELOCK_ETCD_BIN): %w", p, root, err)
	}
	return p, nil
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// etcdLayout lays out etcd members: ports[i] = {client, peer}.
func etcdLayout(o options) (layout, error) {
	bin, err := etcdBinary()
	if err != nil {
		return layout{}, err
	}
	token := "fencelock-" + randomToken()
	return layout{
		portsPerMember: 2,
		peerPorts:      []int{1},
		files: func(i int, dir string, ports [][]int) ([]string, error) {
			var initial []string
			for j, p := range ports {
				initial = append(initial, fmt.Sprintf("etcd-%d=%s://127.0.0.1:%d", j+1, etcdScheme(o), p[1]))
			}
			client := fmt.Sprintf("%s://127.0.0.1:%d", etcdScheme(o), ports[i][0])
			peer := fmt.Sprintf("%s://127.0.0.1:%d", etcdScheme(o), ports[i][1])
			argv := []string{
				bin,
				"--name", fmt.Sprintf("etcd-%d", i+1),
				"--data-dir", filepath.Join(dir, "data"),
				"--listen-client-urls", client,
				"--advertise-client-urls", client,
				"--listen-peer-urls", peer,
				"--initial-advertise-peer-urls", peer,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new",
				"--initial-cluster-token", token,
				// etcd's defaults, spelled out: tests that kill the leader
				// wait about one election timeout for the next one.
				"--heartbeat-interval", "100",
				"--election-timeout", "1000",
				"--log-outputs", "stdout",
			}
			argv = append(argv, etcdSecArgs(o, fmt.Sprintf("127.0.0.1:%d", ports[i][0]))...)
			return append(argv, o.etcdArgs...), nil
		},
	}, nil
}

// Defaults for ZooKeeper from the Debian package.
const (
	defaultZKClasspath = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
	zkMainClass        = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// zkClasspath returns FENCELOCK_ZK_CLASSPATH or the Debian default, after
// checking that every jar in it exists. zookeeper.jar's manifest names its
// other dependencies; slf4j-simple sends the server's log to stdout.
func zkClasspath() (string, error) {
	cp := os.Getenv("FENCELOCK_ZK_CLASSPATH")
	src := "FENCELOCK_ZK_CLASSPATH=" + cp
	if cp == "" {
		cp, src = defaultZKClasspath, "default classpath"
	}
	for _, e := range filepath.SplitList(cp) {
		if _, err := os.Stat(e); err != nil {
			return "", fmt.Errorf("zookeeper not found: %s: %w (install it with \"apt-get install -y zookeeper\", or set FENCELOCK_ZK_CLASSPATH)", src, err)
		}
	}
	return cp, nil
}

// javaBinary returns $JAVA_HOME/bin/java or java from PATH.
func javaBinary() (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		p := filepath.Join(h, "bin", "java")
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("JAVA_HOME=%s: %w", h, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("java not found (install a JRE, e.g. \"apt-get install -y zookeeper\" pulls one in): %w", err)
	}
	return p, nil
}

// juteFlags returns the JVM flag that sets jute.maxbuffer, if o sets it.
func juteFlags(o options) []string {
	if o.juteMaxBuffer > 0 {
		return []string{fmt.Sprintf("-Djute.maxbuffer=%d", o.juteMaxBuffer)}
	}
	return nil
}

// zkLayout lays out ZooKeeper servers: ports[i] = {client, quorum,
// election}.
func zkLayout(o options) (layout, error) {
	java, err := javaBinary()
	if err != nil {
		return layout{}, err
	}
	cp, err := zkClasspath()
	if err != nil {
		return layout{}, err
	}
	if cp, err = zkSecureClasspath(o, cp); err != nil {
		return layout{}, err
	}
	ticks := func(d time.Duration, min int) int {
		n := int((d + o.tickTime - 1) / o.tickTime)
		return max(n, min)
	}
	return layout{
		portsPerMember: 3 + zkSecurePorts(o), // client, quorum, election[, secure client]
		peerPorts:      []int{1, 2},
		files: func(i int, dir string, ports [][]int) ([]string, error) {
			data := filepath.Join(dir, "data")
			if err := os.MkdirAll(data, 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
				return nil, err
			}
			tick := o.tickTime.Milliseconds()
			var cfg strings.Builder
			fmt.Fprintf(&cfg, "tickTime=%d\n", tick)
			// A follower has 5s to join and may lag 2s behind the leader,
			// whatever the tick.
			fmt.Fprintf(&cfg, "initLimit=%d\n", ticks(5*time.Second, 2))
			fmt.Fprintf(&cfg, "syncLimit=%d\n", ticks(2*time.Second, 2))
			fmt.Fprintf(&cfg, "dataDir=%s\n", data)
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
			conf := filepath.Join(dir, "zoo.cfg")
			if err := os.WriteFile(conf, []byte(cfg.String()), 0o644); err != nil {
				return nil, err
			}
			argv := []string{
				java,
				"-Xmx256m", "-Xms32m", "-Xss512k",
				"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
				"-Djava.net.preferIPv4Stack=true",
				"-Dzookeeper.admin.enableServer=false",
				"-Dorg.slf4j.simpleLogger.logFile=System.out",
				"-Dorg.slf4j.simpleLogger.showDateTime=true",
				"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
			}
			argv = append(argv, juteFlags(o)...)
			return append(argv, "-cp", cp, zkMainClass, conf), nil
		},
	}, nil
}
