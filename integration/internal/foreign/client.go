package foreign

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// Recipe is a foreign lock recipe a Client runs.
type Recipe struct {
	lang  string // "curator" or "kazoo"
	arg   string // the program's RECIPE argument
	reads bool   // its grants are shared (read) grants
}

// The recipes.
var (
	CuratorMutex = Recipe{"curator", "mutex", false}    // InterProcessMutex
	CuratorRead  = Recipe{"curator", "rw-read", true}   // InterProcessReadWriteLock.readLock()
	CuratorWrite = Recipe{"curator", "rw-write", false} // InterProcessReadWriteLock.writeLock()
	CuratorLatch = Recipe{"curator", "latch", false}    // LeaderLatch
	// KazooLock is Kazoo's Lock with extra_lock_patterns ["-lock-"].
	// Kazoo 2.8's ReadLock deadlocks with writers (python-zk/kazoo#649,
	// fixed in 2.9), so its read-write lock is not offered.
	KazooLock = Recipe{"kazoo", "lock", false}
)

// String names the recipe, as "curator-mutex" or "kazoo-lock".
func (r Recipe) String() string { return r.lang + "-" + r.arg }

// Options tune a Client. The zero value is the default.
type Options struct {
	// SessionTimeout is asked of the servers (default 4s, which the test
	// ensembles grant as it is).
	SessionTimeout time.Duration
	// Proxied connects the client through proxies of its own, one per
	// member (Client.Proxies), that the test can blackhole.
	Proxied bool
	// Patterns replaces a Kazoo recipe's extra_lock_patterns.
	Patterns []string
}

// DefaultSessionTimeout is the session timeout a Client asks for unless
// Options.SessionTimeout says otherwise.
const DefaultSessionTimeout = 4 * time.Second

// Client is one foreign lock client, a child process. It implements
// fleet.Contender and fleet.Reader; one goroutine at a time may call
// Lock, Unlock and Close, while Kill and Proxies may be called from any.
type Client struct {
	name    string
	recipe  Recipe
	proc    *testutil.Proc
	proxies *cluster.Proxies
	mu      sync.Mutex // orders commands written to the child
}

// Start starts a client of r on the lock znode path (fencelock's
// "<root>/<name>") of cl's ensemble. It returns once the child runs, not
// once it is connected: see WaitReady. The child is killed, by its PID,
// in t.Cleanup if it still runs.
func Start(t testing.TB, cl *cluster.Cluster, r Recipe, path, name string, o Options) *Client {
	t.Helper()
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	c := &Client{name: name, recipe: r}
	servers := cl.Endpoints()
	if o.Proxied {
		c.proxies = cluster.NewProxies(t, cl)
		servers = c.proxies.Endpoints()
	}
	args := []string{strings.Join(servers, ","), path, r.arg, strconv.FormatInt(o.SessionTimeout.Milliseconds(), 10)}
	c.proc = testutil.StartProc(t, command(t, r, args, o.Patterns), testutil.ProcConfig{})
	return c
}

// command returns the command line of a client of r.
func command(t testing.TB, r Recipe, args, patterns []string) *exec.Cmd {
	t.Helper()
	if r.lang == "kazoo" {
		py := python(t)
		if patterns != nil {
			args = append(args, strings.Join(patterns, ","))
		}
		return exec.Command(py, append([]string{filepath.Join(sourceDir(t), "kazoo_client.py")}, args...)...)
	}
	if patterns != nil {
		t.Fatalf("foreign: %v takes no lock patterns", r)
	}
	dir, classpath := java(t)
	javaBin, err := jdkTool("java")
	if err != nil {
		cluster.Unavailable(t, "foreign: %v", err)
	}
	// A small heap and the first JIT tier only: a client runs short
	// requests, and a test starts several of them on a loaded machine.
	jvm := []string{"-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.net.preferIPv4Stack=true", "-Dzookeeper.sasl.client=false",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", dir + ":" + classpath, "CuratorClient"}
	return exec.Command(javaBin, append(jvm, args...)...)
}

// readyWait bounds how long Fleet waits for its clients to connect: JVMs
// start slowly on a loaded machine.
const readyWait = 2 * time.Minute

// Fleet starts n clients of r on path, named "<recipe>-<i>", and waits
// until each is connected; a client that does not get there within
// readyWait fails t.
func Fleet(t testing.TB, cl *cluster.Cluster, r Recipe, path string, n int, o Options) []*Client {
	t.Helper()
	start := time.Now()
	cs := make([]*Client, n)
	for i := range cs {
		cs[i] = Start(t, cl, r, path, fmt.Sprintf("%v-%d", r, i), o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyWait)
	defer cancel()
	for _, c := range cs {
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("foreign: %d %v clients connected in %v", n, r, time.Since(start).Round(time.Millisecond))
	return cs
}

// Name returns the client's name.
func (c *Client) Name() string { return c.name }

// Reads reports whether the client's grants are shared grants.
func (c *Client) Reads() bool { return c.recipe.reads }

// Recipe returns the recipe the client runs.
func (c *Client) Recipe() Recipe { return c.recipe }

// PID returns the child's process ID.
func (c *Client) PID() int { return c.proc.Cmd.Process.Pid }

// Proxies returns the proxies the client connects through, or nil
// without Options.Proxied.
func (c *Client) Proxies() *cluster.Proxies { return c.proxies }

// WaitReady waits until the client is connected to the ensemble.
func (c *Client) WaitReady(ctx context.Context) error {
	return c.expect(ctx, "start", "ready")
}

// Lock asks the client to acquire and waits until its recipe's acquire
// has returned; it returns the czxid of the client's own znode.
func (c *Client) Lock(ctx context.Context) (int64, error) {
	line, err := c.command(ctx, "lock")
	if err != nil {
		return 0, err
	}
	s, ok := strings.CutPrefix(line, "held ")
	tok, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil || tok <= 0 {
		return 0, fmt.Errorf("%s: lock: answered %q, want \"held CZXID\"", c.name, line)
	}
	return tok, nil
}

// Unlock tells the client its belief is over and waits until its recipe
// has released.
func (c *Client) Unlock(ctx context.Context) error {
	return c.send(ctx, "unlock", "released")
}

// Close closes the client's ZooKeeper client and waits until the child
// has exited, with status 0.
func (c *Client) Close(ctx context.Context) error {
	if err := c.send(ctx, "exit", "bye"); err != nil {
		return err
	}
	select {
	case <-c.proc.Exited():
	case <-ctx.Done():
		return fmt.Errorf("%s: exit: %w", c.name, ctx.Err())
	}
	if code := c.proc.Code(); code != 0 {
		return fmt.Errorf("%s: exited with status %d: %s", c.name, code, c.proc.Stderr.String())
	}
	return nil
}

// Kill kills the child with SIGKILL, by its PID, and waits until it has
// exited; it fails unless that signal is what ended it.
func (c *Client) Kill() error {
	if err := c.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("%s: kill: %w", c.name, err)
	}
	if code := c.proc.Code(); code != 128+int(syscall.SIGKILL) {
		return fmt.Errorf("%s: kill: exit status %d, want %d", c.name, code, 128+int(syscall.SIGKILL))
	}
	return nil
}

// send writes cmd and waits for the answer want.
func (c *Client) send(ctx context.Context, cmd, want string) error {
	line, err := c.command(ctx, cmd)
	if err == nil && line != want {
		err = fmt.Errorf("%s: %s: answered %q, want %q", c.name, cmd, line, want)
	}
	return err
}

// expect waits for the answer want to what the client did on its own.
func (c *Client) expect(ctx context.Context, what, want string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	line, err := c.read(ctx, what)
	if err == nil && line != want {
		err = fmt.Errorf("%s: %s: said %q, want %q", c.name, what, line, want)
	}
	return err
}

// command writes cmd and returns the answer.
func (c *Client) command(ctx context.Context, cmd string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.proc.Stdin, cmd+"\n"); err != nil {
		return "", c.exited(cmd, err)
	}
	return c.read(ctx, cmd)
}

// read returns the next line of the child's output.
func (c *Client) read(ctx context.Context, what string) (string, error) {
	select {
	case line, ok := <-c.proc.Lines:
		if !ok {
			return "", c.exited(what, io.EOF)
		}
		return line, nil
	case <-ctx.Done():
		return "", fmt.Errorf("%s: %s: %w", c.name, what, ctx.Err())
	}
}

// exited describes a child that stopped answering.
func (c *Client) exited(what string, err error) error {
	select {
	case <-c.proc.Exited():
		return fmt.Errorf("%s: %s: the client exited with status %d: %w\n%s",
			c.name, what, c.proc.Code(), ErrExited, c.proc.Stderr.String())
	case <-time.After(time.Second):
		return fmt.Errorf("%s: %s: %w", c.name, what, err)
	}
}

// ErrExited is what a command to a client whose process has exited wraps.
var ErrExited = errors.New("client exited")
