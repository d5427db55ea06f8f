// Package foreign runs the ZooKeeper lock recipes users already run —
// Apache Curator (Java) and Kazoo (Python), from Debian's packages — as
// child processes a test drives line by line, so that fencelock Lockers
// can contend with the real recipes on one lock name (issue 33).
//
// Each child is one client of one recipe (CuratorClient.java,
// kazoo_client.py, embedded here). It connects to the ensemble directly or
// through proxies the test can cut, and answers "lock" with "held CZXID"
// once the recipe's acquire has returned, and "unlock" with "released".
// A [Client] wraps one child as a fleet.Contender: its belief runs from
// the "held" line to the "unlock" command, which lies inside the recipe's
// own. The Java program is compiled once per test binary; call [Cleanup]
// from TestMain.
//
// When Curator, a JDK or Kazoo is missing, a test that starts such a
// client fails under CI=true and is skipped otherwise, with the command
// that installs it ("make deps" does).
package foreign

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/integration/cluster"
)

//go:embed CuratorClient.java kazoo_client.py
var sources embed.FS

// Where the recipes come from, unless the environment says otherwise.
const (
	// curatorJar's manifest names the rest of Curator's and ZooKeeper's
	// jars; slf4jBinding sends their log lines, warnings only, to stderr.
	curatorJar   = "/usr/share/java/curator-recipes.jar"
	slf4jBinding = "/usr/share/java/slf4j-simple.jar"
	// Debian's python3 sees python3-kazoo; a python3 first on PATH (a
	// pyenv shim) may not.
	defaultPython = "/usr/bin/python3"
	installHint   = `install them with "apt-get install -y libcurator-recipes-java default-jdk-headless python3-kazoo" (make deps does)`
)

// Environment variables that point at other installations.
const (
	// CuratorClasspathEnv replaces Curator's classpath (the jars of
	// curator-recipes, -framework, -client, ZooKeeper and their
	// dependencies, separated by ':').
	CuratorClasspathEnv = "FENCELOCK_CURATOR_CLASSPATH"
	// PythonEnv names a python3 that can import kazoo.
	PythonEnv = "FENCELOCK_KAZOO_PYTHON"
)

// built is what one test binary prepares once: the sources written to a
// temporary directory, and CuratorClient compiled there.
var built struct {
	once, javaOnce sync.Once
	dir            string
	err            error
	classpath      string
	javaErr        error
}

// write writes the sources to a temporary directory.
func write() (string, error) {
	dir, err := os.MkdirTemp("", "fencelock-foreign-")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"CuratorClient.java", "kazoo_client.py"} {
		b, err := sources.ReadFile(name)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if err != nil {
			return dir, err
		}
	}
	return dir, nil
}

// compile compiles CuratorClient.java in dir and returns the classpath
// to run it with (without dir).
func compile(dir string) (string, error) {
	classpath := os.Getenv(CuratorClasspathEnv)
	if classpath == "" {
		for _, jar := range []string{curatorJar, slf4jBinding} {
			if _, err := os.Stat(jar); err != nil {
				return "", fmt.Errorf("curator %w: %w; %s", errMissing, err, installHint)
			}
		}
		classpath = curatorJar + ":" + slf4jBinding
	}
	javac, err := jdkTool("javac")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(javac, "-nowarn", "-d", dir, "-cp", classpath, filepath.Join(dir, "CuratorClient.java"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compile CuratorClient.java: %v\n%s", err, out)
	}
	return classpath, nil
}

// jdkTool returns $JAVA_HOME/bin/name or name from PATH.
func jdkTool(name string) (string, error) {
	p, err := exec.LookPath(name)
	if h := os.Getenv("JAVA_HOME"); h != "" {
		p, err = exec.LookPath(filepath.Join(h, "bin", name))
	}
	if err != nil {
		return "", fmt.Errorf("%s %w: %w; %s", name, errMissing, err, installHint)
	}
	return p, nil
}

// sourceDir returns the directory the sources were written to, writing
// them on the first call.
func sourceDir(t testing.TB) string {
	t.Helper()
	built.once.Do(func() { built.dir, built.err = write() })
	if built.err != nil {
		t.Fatalf("foreign: %v", built.err)
	}
	return built.dir
}

// java returns the directory of the compiled CuratorClient and the
// classpath it runs with, compiling it on the first call; a failure fails
// (CI=true) or skips t.
func java(t testing.TB) (dir, classpath string) {
	t.Helper()
	dir = sourceDir(t)
	built.javaOnce.Do(func() { built.classpath, built.javaErr = compile(dir) })
	if errors.Is(built.javaErr, errMissing) {
		cluster.Unavailable(t, "foreign: %v", built.javaErr)
	} else if built.javaErr != nil {
		t.Fatalf("foreign: %v", built.javaErr)
	}
	return dir, built.classpath
}

// python returns the python3 to run Kazoo with, after checking that it
// can import kazoo; a failure fails (CI=true) or skips t.
func python(t testing.TB) string {
	t.Helper()
	py := os.Getenv(PythonEnv)
	if py == "" {
		py = defaultPython
	}
	out, err := exec.Command(py, "-c", "import kazoo.recipe.lock").CombinedOutput()
	if err != nil {
		cluster.Unavailable(t, "foreign: %s cannot import kazoo: %v (%s); %s", py, err, strings.TrimSpace(string(out)), installHint)
	}
	return py
}

// errMissing is what the error of a missing installation wraps.
var errMissing = errors.New("not installed")

// Cleanup removes what the test binary prepared. Call it once the tests
// have run (testutil.Main's cleanup).
func Cleanup() error {
	if built.dir == "" {
		return nil
	}
	return os.RemoveAll(built.dir)
}
