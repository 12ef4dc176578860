package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// testNet is the scale-out tests' network: a bridge in the root network
// namespace holding the control plane's address (.1), and one network
// namespace per node joined to it by a veth pair, the node at .(10+i).
type testNet struct {
	tb testing.TB
	// prefix is the /24's first three octets, such as "10.77.0".
	prefix string
	bridge string
	// tag makes the names of this run unique: other runs may be going on.
	tag   string
	nodes []netNode
}

type netNode struct {
	ns, vethHost, vethNode, addr string
}

// newTestNet creates the bridge on the first 10.77.X.0/24 that no route of
// the machine uses, and removes everything at cleanup.
func newTestNet(tb testing.TB, nodes int) *testNet {
	tb.Helper()
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").CombinedOutput()
	if err != nil {
		tb.Fatalf("ip route: %v %s (iproute2 is needed: `make deps-test` installs it)", err, routes)
	}
	b := make([]byte, 3)
	rand.Read(b)
	n := &testNet{tb: tb, tag: hex.EncodeToString(b)[:5]}
	for x := 0; x < 256 && n.prefix == ""; x++ {
		if p := fmt.Sprintf("10.77.%d", x); !strings.Contains(string(routes), p+".") {
			n.prefix = p
		}
	}
	if n.prefix == "" {
		tb.Fatal("no free 10.77.X.0/24 for the test network")
	}
	n.bridge = "scbr" + n.tag
	tb.Cleanup(n.remove)
	n.ip("link", "add", n.bridge, "type", "bridge")
	n.ip("addr", "add", n.hostAddr()+"/24", "dev", n.bridge)
	n.ip("link", "set", n.bridge, "up")
	for i := range nodes {
		nn := netNode{
			ns:       fmt.Sprintf("space-sc%s-%d", n.tag, i+1),
			vethHost: fmt.Sprintf("sc%s%dh", n.tag, i+1),
			vethNode: fmt.Sprintf("sc%s%dn", n.tag, i+1),
			addr:     fmt.Sprintf("%s.%d", n.prefix, 11+i),
		}
		n.nodes = append(n.nodes, nn)
		n.ip("netns", "add", nn.ns)
		n.ip("link", "add", nn.vethHost, "type", "veth", "peer", "name", nn.vethNode)
		n.ip("link", "set", nn.vethNode, "netns", nn.ns)
		n.ip("link", "set", nn.vethHost, "master", n.bridge, "up")
		n.ip("-n", nn.ns, "addr", "add", nn.addr+"/24", "dev", nn.vethNode)
		n.ip("-n", nn.ns, "link", "set", nn.vethNode, "up")
		n.ip("-n", nn.ns, "link", "set", "lo", "up")
	}
	return n
}

// hostAddr is the control plane's address on the bridge.
func (n *testNet) hostAddr() string { return n.prefix + ".1" }

// nsPath is the file naming node i's network namespace.
func (n *testNet) nsPath(i int) string { return "/run/netns/" + n.nodes[i].ns }

// setLink takes node i's link up or down (a network partition).
func (n *testNet) setLink(i int, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	n.ip("link", "set", n.nodes[i].vethHost, state)
}

func (n *testNet) ip(args ...string) {
	n.tb.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.tb.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
	}
}

// remove deletes the namespaces (their veth ends go with them) and the
// bridge, then checks that none of them is left.
func (n *testNet) remove() {
	for _, nn := range n.nodes {
		_ = exec.Command("ip", "netns", "del", nn.ns).Run()
		_ = exec.Command("ip", "link", "del", nn.vethHost).Run() // gone with its peer, normally
	}
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
	links, _ := exec.Command("ip", "-o", "link", "show").CombinedOutput()
	netns, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	for _, l := range strings.Split(string(links)+string(netns), "\n") {
		if strings.Contains(l, "sc"+n.tag) {
			n.tb.Errorf("test network left behind: %s", l)
		}
	}
	if _, err := os.Stat("/run/netns/space-sc" + n.tag + "-1"); err == nil {
		n.tb.Errorf("network namespace file /run/netns/space-sc%s-1 left behind", n.tag)
	}
}
