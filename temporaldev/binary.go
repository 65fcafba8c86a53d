package temporaldev

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinaryEnv names the environment variable that overrides where the Temporal
// CLI binary is looked for.
const BinaryEnv = "TEMPORAL_CLI"

// ErrBinaryNotFound is returned (wrapped) by Start and DefaultBinary when the
// Temporal CLI binary does not exist. The wrapping error says how to build it.
var ErrBinaryNotFound = errors.New("temporal CLI binary not found")

// modulePath is the main module's path; its go.mod marks the repository root.
const modulePath = "github.com/paygate/paygate"

// buildHint tells a developer how to get the binary.
const buildHint = "run tools/build-temporal.sh (builds the CLI pinned in tools/go.mod into .cache/bin/temporal) or set " + BinaryEnv

// DefaultBinary returns the Temporal CLI that Start runs when Options.Binary is
// empty: $TEMPORAL_CLI when set, otherwise .cache/bin/temporal in the paygate
// repository that contains the working directory. The error wraps
// ErrBinaryNotFound when that file does not exist.
func DefaultBinary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		return checkBinary(p)
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("%w: %v; %s", ErrBinaryNotFound, err, buildHint)
	}
	return checkBinary(filepath.Join(root, ".cache", "bin", "temporal"))
}

func checkBinary(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%w at %s; %s", ErrBinaryNotFound, path, buildHint)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file; %s", ErrBinaryNotFound, path, buildHint)
	}
	return path, nil
}

// repoRoot walks up from the working directory to the directory whose go.mod
// declares the paygate module. Tests run in their package's directory and the
// paygate binary usually in the repository root, so both find it.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if goModDeclares(filepath.Join(dir, "go.mod"), modulePath) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func goModDeclares(path, module string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == module
		}
	}
	return false
}
