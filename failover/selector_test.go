package failover

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// t0 is the scripts' time zero.
var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

// step is one line of a script: at a time (seconds from t0), one or more
// events separated by ";", then one Decide.
//
// Events: "conn I", "chain I ID" (ChainID must return true) or
// "chain I ID rejected" (false), "head I N", "headless I" (HeadsUnknown),
// "lost I", "tick" (nothing).
type step struct {
	at  int
	do  string
	sw  string // the Switch Decide must return ("from>to reason"), "" none
	why string // if set: each upstream's Status.Why, comma-separated, "ok" for ""
}

// run plays the script against a Selector made from cfg. After every step
// it checks, besides the step's own expectations, what holds always:
// Active follows the switches, Status.Active and Status.Healthy agree with
// Active and Why, AnyHealthy agrees with the Statuses, and a second
// Decide at the same time returns none.
func run(t *testing.T, cfg Config, script []step) *Selector {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	active := -1
	for n, st := range script {
		now := at(st.at)
		for ev := range strings.SplitSeq(st.do, ";") {
			apply(t, s, strings.Fields(ev), now, n)
		}
		sw, ok := s.Decide(now)
		got := ""
		if ok {
			got = sw.String()
			if sw.From != active {
				t.Errorf("step %d (%s): switch from %d, but %d was active", n, st.do, sw.From, active)
			}
			active = sw.To
		}
		if got != st.sw {
			t.Errorf("step %d (t=%d %s): Decide = %q, want %q", n, st.at, st.do, got, st.sw)
		}
		if again, ok := s.Decide(now); ok {
			t.Errorf("step %d (%s): a second Decide at the same time switched: %v", n, st.do, again)
		}
		if s.Active() != active {
			t.Errorf("step %d (%s): Active = %d, want %d", n, st.do, s.Active(), active)
		}
		var whys []string
		anyHealthy := false
		for i := range cfg.Upstreams {
			status := s.Status(i, now)
			w := status.Why
			if w == "" {
				w = "ok"
			}
			whys = append(whys, w)
			if status.Healthy != (status.Why == "") {
				t.Errorf("step %d: upstream %d: Healthy %v with Why %q", n, i, status.Healthy, status.Why)
			}
			if status.Active != (i == active) {
				t.Errorf("step %d: upstream %d: Status.Active %v, active is %d", n, i, status.Active, active)
			}
			anyHealthy = anyHealthy || status.Healthy
		}
		if st.why != "" && strings.Join(whys, ",") != st.why {
			t.Errorf("step %d (t=%d %s): why = %q, want %q", n, st.at, st.do, strings.Join(whys, ","), st.why)
		}
		if s.AnyHealthy(now) != anyHealthy {
			t.Errorf("step %d: AnyHealthy = %v, Statuses say %v", n, !anyHealthy, anyHealthy)
		}
	}
	return s
}

func apply(t *testing.T, s *Selector, f []string, now time.Time, n int) {
	t.Helper()
	if len(f) == 0 || f[0] == "tick" {
		return
	}
	i, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("step %d: bad event %q", n, f)
	}
	switch f[0] {
	case "conn":
		s.Connected(i, now)
	case "lost":
		s.Lost(i, now)
	case "headless":
		s.HeadsUnknown(i, now)
	case "head":
		h, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			t.Fatalf("step %d: bad head %q", n, f)
		}
		s.Head(i, h, now)
	case "chain":
		want := len(f) < 4 || f[3] != "rejected"
		if got := s.ChainID(i, f[2], now); got != want {
			t.Errorf("step %d: ChainID(%d, %s) = %v, want %v", n, i, f[2], got, want)
		}
	default:
		t.Fatalf("step %d: unknown event %q", n, f)
	}
}

// up connects upstreams with chain id 0x1, in the order given.
func up(is ...int) string {
	var b strings.Builder
	for _, i := range is {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString("conn " + strconv.Itoa(i) + "; chain " + strconv.Itoa(i) + " 0x1")
	}
	return b.String()
}

func TestScripts(t *testing.T) {
	two := Config{Upstreams: 2, MaxHeadLag: 2, HeadTimeout: 10 * time.Second, FailbackAfter: 30 * time.Second}
	three := two
	three.Upstreams = 3
	// slow: heads do not stall within the script, to follow failback alone.
	slow := two
	slow.HeadTimeout = time.Hour
	never := slow
	never.FailbackAfter = 0
	negative := slow
	negative.FailbackAfter = -time.Second
	one := Config{Upstreams: 1, MaxHeadLag: 2, HeadTimeout: 10 * time.Second, FailbackAfter: 30 * time.Second}

	tests := []struct {
		name   string
		cfg    Config
		script []step
	}{
		{"startup: nothing connected, nothing active", two, []step{
			{0, "tick", "", "disconnected,disconnected"},
		}},
		{"startup: the first eligible wins, and a chain id is needed", two, []step{
			{0, "conn 1", "", "disconnected,chain id unknown"},
			{1, "chain 1 0x1", "-1>1 first", "disconnected,ok"},
			{2, "conn 0; chain 0 0x01", "", "ok,ok"}, // 0x01 is 0x1; failback needs 30 s
			{3, "head 0 5; head 1 5", "", "ok,ok"},
		}},
		{"startup: the preferred wins if both are eligible before Decide", two, []step{
			{0, up(1, 0), "-1>0 first", "ok,ok"},
		}},
		{"dead active: the standby", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{1, "head 0 7; head 1 7", "", "ok,ok"},
			{2, "lost 0", "0>1 lost", "disconnected,ok"},
			{3, "conn 0; chain 0 0x1; head 0 8; head 1 8", "", "ok,ok"},
		}},
		{"dead active, the standby stalled: the standby all the same", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{5, "head 0 7", "", "ok,ok"},
			{11, "tick", "", "ok,stalled"},
			{12, "lost 0", "0>1 lost", "disconnected,stalled"},
		}},
		{"lagging active: the standby at the best head, not the preferred one", three, []step{
			{0, up(0, 1, 2), "-1>0 first", "ok,ok,ok"},
			{1, "head 0 10; head 1 10; head 2 10", "", "ok,ok,ok"},
			{2, "head 1 12; head 2 12", "", "ok,ok,ok"}, // MaxHeadLag behind: still healthy
			{3, "head 2 13", "0>2 lagging", "lagging,ok,ok"},
			{4, "head 0 13", "", "ok,ok,ok"},
		}},
		{"lagging active: a healthy standby without a head has the benefit of the doubt", three, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok,disconnected"},
			{1, "head 0 10; " + up(2) + "; head 2 13", "0>1 lagging", "lagging,ok,ok"},
			{2, "head 1 13", "", "lagging,ok,ok"},
			{3, "lost 1; lost 2", "1>0 lost", "ok,disconnected,disconnected"}, // the best head is gone with them
		}},
		{"stalled active without heads: the standby with heads", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{5, "head 1 1", "", "ok,ok"},
			{10, "head 1 2", "", "ok,ok"}, // exactly HeadTimeout: not yet
			{11, "tick", "0>1 stalled", "stalled,ok"},
		}},
		{"stalled active with heads: the standby", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{1, "head 0 1; head 1 1", "", "ok,ok"},
			{9, "head 1 2", "", "ok,ok"},
			{12, "tick", "0>1 stalled", "stalled,ok"},
			{13, "head 0 2", "", "ok,ok"},
		}},
		{"all stalled: the active stays, until another has a head", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{1, "head 0 1; head 1 1", "", "ok,ok"},
			{12, "tick", "", "stalled,stalled"},
			{13, "head 1 2", "0>1 stalled", "stalled,ok"},
		}},
		{"lagging active, the others stalled: the active stays", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{1, "head 0 1; head 1 5", "0>1 lagging", "lagging,ok"},
			{10, "head 0 2", "", "lagging,ok"},
			{12, "tick", "", "lagging,stalled"},
			{13, "head 0 5", "1>0 stalled", "ok,stalled"},
		}},
		{"another chain id is never used; the reference is the first reported", three, []step{
			{0, "conn 1; chain 1 0x5", "-1>1 first", "disconnected,ok,disconnected"},
			{1, "conn 0; chain 0 0x1 rejected; head 0 1000", "", "chain id mismatch,ok,disconnected"},
			{2, "conn 2; chain 2 0X05; head 2 10; head 1 10", "", "chain id mismatch,ok,ok"}, // 0's head counts for nothing
			{3, "lost 1", "1>2 lost", "chain id mismatch,disconnected,ok"},
			{4, "chain 0 0x5 rejected", "", "chain id mismatch,disconnected,ok"}, // not on this connection
			{5, "lost 2", "2>-1 lost", "chain id mismatch,disconnected,disconnected"},
			{6, "conn 0; chain 0 0x5", "-1>0 lost", "ok,disconnected,disconnected"},
		}},
		{"an active whose chain id changes on the same connection is lost", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{1, "chain 0 0x2 rejected", "0>1 lost", "chain id mismatch,ok"},
			{2, "chain 0 0x1 rejected", "", "chain id mismatch,ok"},
		}},
		{"a chain id that is not a hex quantity never matches nor becomes the reference", two, []step{
			{0, "conn 0; chain 0 1 rejected; conn 1; chain 1 \"0x1\"", "-1>1 first", "chain id mismatch,ok"},
		}},
		{"flapping preferred never gets the traffic back", slow, []step{
			{0, "conn 1; chain 1 0x1; head 1 100", "-1>1 first", "disconnected,ok"},
			{1, up(0) + "; head 0 100", "", "ok,ok"},
			{25, "lost 0", "", "disconnected,ok"},
			{26, up(0) + "; head 0 101; head 1 101", "", "ok,ok"},
			{50, "lost 0", "", "disconnected,ok"},
			{51, up(0) + "; head 0 102; head 1 102", "", "ok,ok"},
			{70, "head 1 105", "", "lagging,ok"}, // a break without a drop counts too
			{71, "head 0 105", "", "ok,ok"},
			{100, "tick", "", "ok,ok"}, // 29 s
			{101, "tick", "1>0 failback", "ok,ok"},
		}},
		{"failback only once the preferred has a head, and not below the active's", slow, []step{
			{0, "conn 1; chain 1 0x1; head 1 10", "-1>1 first", "disconnected,ok"},
			{1, up(0), "", "ok,ok"},
			{40, "tick", "", "ok,ok"}, // healthy 39 s, but no head
			{41, "head 0 9", "", "ok,ok"},
			{42, "head 1 11; head 0 10", "", "ok,ok"},
			{43, "head 0 11", "1>0 failback", "ok,ok"},
		}},
		{"a stall seen only when the next head comes restarts the failback wait", two, []step{
			{0, up(1), "-1>1 first", "disconnected,ok"},
			{0, up(0), "", "ok,ok"},
			{5, "head 0 1; head 1 1", "", "ok,ok"},
			{13, "head 1 2", "", "ok,ok"},
			{20, "head 0 2; head 1 3", "", "ok,ok"}, // 0 was stalled from 15 to 20
			{28, "head 0 4; head 1 4", "", "ok,ok"},
			{36, "head 0 5; head 1 5", "", "ok,ok"},
			{44, "head 0 6; head 1 6", "", "ok,ok"},
			{49, "head 0 7; head 1 7", "", "ok,ok"},
			{50, "tick", "1>0 failback", "ok,ok"},
		}},
		{"failback to a head above the active's", slow, []step{
			{0, "conn 1; chain 1 0x1; head 1 10", "-1>1 first", "disconnected,ok"},
			{1, up(0) + "; head 0 12", "", "ok,ok"},
			{31, "tick", "1>0 failback", "ok,ok"},
		}},
		{"no failback while the active has no head", slow, []step{
			{0, up(1), "-1>1 first", "disconnected,ok"},
			{1, up(0) + "; head 0 12", "", "ok,ok"},
			{40, "tick", "", "ok,ok"},
			{41, "head 1 12", "1>0 failback", "ok,ok"},
		}},
		{"failback waits for the most preferred healthy one", Config{Upstreams: 3, MaxHeadLag: 2, HeadTimeout: time.Hour, FailbackAfter: 30 * time.Second}, []step{
			{0, "conn 2; chain 2 0x1; head 2 10", "-1>2 first", "disconnected,disconnected,ok"},
			{1, up(1) + "; head 1 10", "", "disconnected,ok,ok"},
			{20, up(0) + "; head 0 10", "", "ok,ok,ok"},
			{40, "tick", "", "ok,ok,ok"}, // 1 is ready, 0 not yet
			{50, "tick", "2>0 failback", "ok,ok,ok"},
		}},
		{"FailbackAfter 0: never fails back", never, []step{
			{0, "conn 1; chain 1 0x1; head 1 10", "-1>1 first", "disconnected,ok"},
			{1, up(0) + "; head 0 10", "", "ok,ok"},
			{1000, "head 0 11; head 1 11", "", "ok,ok"},
			{1001, "lost 1", "1>0 lost", "ok,disconnected"},
		}},
		{"FailbackAfter negative: never fails back", negative, []step{
			{0, "conn 1; chain 1 0x1; head 1 10", "-1>1 first", "disconnected,ok"},
			{1, up(0) + "; head 0 10", "", "ok,ok"},
			{1000, "head 0 11; head 1 11", "", "ok,ok"},
		}},
		{"single upstream: no chain id needed", one, []step{
			{0, "conn 0", "-1>0 first", "ok"},
			{1, "head 0 5", "", "ok"},
			{101, "chain 0 0x1", "", "stalled"}, // no head for 100 s
			{102, "lost 0", "0>-1 lost", "disconnected"},
			{103, "conn 0; chain 0 0x2 rejected", "-1>0 lost", "ok"}, // mismatch ignored
			{104, "lost 0; conn 0", "", "ok"},                        // drop and back between two Decides
		}},
		{"single upstream: stalled without a head for HeadTimeout, and active all the same", one, []step{
			{0, "conn 0", "-1>0 first", "ok"},
			{10, "tick", "", "ok"}, // a new connection has HeadTimeout for its first head
			{11, "tick", "", "stalled"},
			{12, "head 0 5", "", "ok"},
			{22, "tick", "", "ok"},
			{23, "tick", "", "stalled"},
			{24, "head 0 5", "", "ok"}, // the same number again is a head all the same
			{100, "lost 0; conn 0", "", "ok"},
		}},
		{"single upstream that shows no heads: healthy while connected", one, []step{
			{0, "conn 0; headless 0", "-1>0 first", "ok"},
			{100, "tick", "", "ok"},
			{101, "lost 0", "0>-1 lost", "disconnected"},
			{102, "conn 0", "-1>0 lost", "ok"}, // a new connection is watched again
			{113, "tick", "", "stalled"},
		}},
		{"several upstreams: one that shows no heads stalls", two, []step{
			{0, up(0, 1) + "; headless 0", "-1>0 first", "ok,ok"},
			{5, "head 1 3", "", "ok,ok"},
			{11, "tick", "0>1 stalled", "stalled,ok"},
		}},
		{"lost with nothing eligible: To -1, then the first connected", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{1, "lost 1", "", "ok,disconnected"},
			{2, "lost 0", "0>-1 lost", "disconnected,disconnected"},
			{3, "tick", "", "disconnected,disconnected"},
			{4, "conn 1", "", "disconnected,chain id unknown"},
			{5, "chain 1 0x1", "-1>1 lost", "disconnected,ok"},
			{6, up(0), "", "ok,ok"},
		}},
		{"a new connection of the active forgets its chain id and head", two, []step{
			{0, up(0, 1), "-1>0 first", "ok,ok"},
			{1, "head 0 5; head 1 5", "", "ok,ok"},
			{2, "conn 0", "0>1 lost", "chain id unknown,ok"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.cfg, tc.script) })
	}
}

// TestStatus checks the fields the scripts do not: what an upstream
// reports of its connection, chain id and head.
func TestStatus(t *testing.T) {
	s, err := New(Config{Upstreams: 2, MaxHeadLag: 2, HeadTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check := func(i int, want Status) {
		t.Helper()
		if got := s.Status(i, at(1)); got != want {
			t.Errorf("Status(%d) = %+v, want %+v", i, got, want)
		}
	}
	check(0, Status{Why: WhyDisconnected})
	s.Connected(0, at(0))
	check(0, Status{Connected: true, Why: WhyChainUnknown, ConnectedAt: at(0)})
	s.Head(0, 7, at(0)) // before the chain id: kept, but counts for nothing
	s.ChainID(0, "0x1", at(0))
	s.Decide(at(0))
	check(0, Status{Connected: true, ChainOK: true, Healthy: true, Active: true, HasHead: true, Head: 7, HeadAt: at(0), ConnectedAt: at(0), Best: 7})
	s.Lost(0, at(0))
	check(0, Status{HasHead: true, Head: 7, Active: true, Why: WhyDisconnected, HeadAt: at(0), ConnectedAt: at(0)}) // not decided yet
	s.Decide(at(0))
	check(0, Status{HasHead: true, Head: 7, Why: WhyDisconnected, HeadAt: at(0), ConnectedAt: at(0)})
	s.Connected(0, at(0))
	check(0, Status{Connected: true, Why: WhyChainUnknown, ConnectedAt: at(0)})
	for _, i := range []int{-1, 2} {
		check(i, Status{Why: WhyDisconnected})
	}
}

// TestBadInput: indexes out of range and events for upstreams that are
// not connected change nothing, and nothing panics.
func TestBadInput(t *testing.T) {
	s, err := New(Config{Upstreams: 2, HeadTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{-1, 2, 1 << 40} {
		s.Connected(i, at(0))
		if s.ChainID(i, "0x1", at(0)) {
			t.Errorf("ChainID(%d) = true", i)
		}
		s.Head(i, 5, at(0))
		s.Lost(i, at(0))
	}
	if s.ChainID(1, "0x1", at(0)) {
		t.Error("ChainID of a disconnected upstream = true")
	}
	s.Head(1, 5, at(0))
	if sw, ok := s.Decide(at(0)); ok {
		t.Errorf("Decide = %v", sw)
	}
	if st := s.Status(1, at(0)); st.HasHead || st.ChainOK {
		t.Errorf("events for a disconnected upstream were kept: %+v", st)
	}
	// The id 1 did not report must not be the reference either.
	s.Connected(1, at(1))
	if !s.ChainID(1, "0x2", at(1)) {
		t.Error("the first id reported after ignored ones is not the reference")
	}
}

func TestNew(t *testing.T) {
	for _, cfg := range []Config{
		{Upstreams: 0, HeadTimeout: time.Second},
		{Upstreams: -1, HeadTimeout: time.Second},
		{Upstreams: 1},
		{Upstreams: 2, HeadTimeout: -time.Second},
		{Upstreams: 2, HeadTimeout: time.Second, ChainID: "1"},
	} {
		if s, err := New(cfg); err == nil || s != nil {
			t.Errorf("New(%+v) = %v, %v; want an error", cfg, s, err)
		}
	}
	s, err := New(Config{Upstreams: 3, HeadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.Active() != -1 || s.AnyHealthy(t0) {
		t.Errorf("a new Selector: Active %d, AnyHealthy %v", s.Active(), s.AnyHealthy(t0))
	}
}

func TestReason(t *testing.T) {
	var names []string
	for _, r := range Reasons() {
		names = append(names, r.String())
	}
	if want := []string{"first", "lost", "lagging", "stalled", "failback"}; !slices.Equal(names, want) {
		t.Errorf("Reasons = %q, want %q", names, want)
	}
	if got := Reason(200).String(); got != "unknown" {
		t.Errorf("Reason(200) = %q", got)
	}
}

func TestNormalizeChainID(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"0x1", "0x1", true},
		{"0x01", "0x1", true},
		{"0X0001", "0x1", true},
		{"0x0", "0x0", true},
		{"0x000", "0x0", true},
		{"0xAbC", "0xabc", true},
		{`"0x89"`, "0x89", true},
		{"0xaa36a7", "0xaa36a7", true},
		{"0x1234567890abcdef1234567890abcdef", "0x1234567890abcdef1234567890abcdef", true},
		{"", "", false},
		{`""`, "", false},
		{`"`, "", false},
		{"0x", "", false},
		{"1", "", false},
		{"12", "", false},
		{"0xg", "", false},
		{"0x1 ", "", false},
		{" 0x1", "", false},
		{"0x-1", "", false},
	}
	for _, tc := range tests {
		got, ok := normalizeChainID(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("normalizeChainID(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRandom plays random events and checks after every Decide what the
// rules promise whatever happened: the active is eligible (or none is),
// an unhealthy active means no upstream is healthy, and the decision is
// stable.
func TestRandom(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		cfg := Config{Upstreams: n, MaxHeadLag: 2, HeadTimeout: 10 * time.Second, FailbackAfter: 5 * time.Second}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(n), 14))
		now := t0
		heads := make([]uint64, n)
		for step := range 20000 {
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			i := rng.IntN(n+1) - 1 // -1 sometimes: out of range
			switch rng.IntN(10) {
			case 0:
				s.Connected(i, now)
			case 1:
				s.Lost(i, now)
			case 2:
				id := "0x1"
				if rng.IntN(8) == 0 {
					id = "0x2"
				}
				s.ChainID(i, id, now)
			case 3, 4, 5, 6:
				if i >= 0 {
					heads[i] += uint64(rng.IntN(4))
					s.Head(i, heads[i], now)
				}
			}
			before := s.Active()
			sw, ok := s.Decide(now)
			if ok && (sw.From != before || sw.From == sw.To || sw.To != s.Active()) {
				t.Fatalf("n=%d step %d: switch %v with %d active before, %d after", n, step, sw, before, s.Active())
			}
			if again, ok := s.Decide(now); ok {
				t.Fatalf("n=%d step %d: %v then %v at the same time", n, step, sw, again)
			}
			a := s.Active()
			anyEligible, anyHealthy := false, false
			for j := range n {
				st := s.Status(j, now)
				anyEligible = anyEligible || st.Connected && (n == 1 || st.ChainOK)
				anyHealthy = anyHealthy || st.Healthy
			}
			if a < 0 && anyEligible {
				t.Fatalf("n=%d step %d: none active, but one is eligible", n, step)
			}
			if a >= 0 {
				st := s.Status(a, now)
				if !st.Connected || n > 1 && !st.ChainOK {
					t.Fatalf("n=%d step %d: active %d is not eligible: %+v", n, step, a, st)
				}
				if !st.Healthy && anyHealthy {
					t.Fatalf("n=%d step %d: active %d is %s while another is healthy", n, step, a, st.Why)
				}
			}
		}
	}
}

// TestHealthySinceWithoutDecide: an upstream's health is evaluated at each
// event, so its wait for failback starts when the event made it healthy,
// even if the caller decides only later.
func TestHealthySinceWithoutDecide(t *testing.T) {
	s, err := New(Config{Upstreams: 2, MaxHeadLag: 2, HeadTimeout: time.Hour, FailbackAfter: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.Connected(1, at(0))
	s.ChainID(1, "0x1", at(0))
	s.Head(1, 10, at(0))
	s.Connected(0, at(0))
	s.ChainID(0, "0x1", at(0))
	s.Head(0, 5, at(0)) // lagging
	if sw, ok := s.Decide(at(0)); !ok || sw != (Switch{From: -1, To: 1, Reason: ReasonFirst}) {
		t.Fatalf("Decide = %v, %v; want -1>1 first", sw, ok)
	}
	s.Head(0, 10, at(2)) // healthy from 2 on
	if sw, ok := s.Decide(at(31)); ok {
		t.Fatalf("Decide at 31 = %v", sw)
	}
	if sw, ok := s.Decide(at(32)); !ok || sw != (Switch{From: 1, To: 0, Reason: ReasonFailback}) {
		t.Fatalf("Decide at 32 = %v, %v; want 1>0 failback", sw, ok)
	}
}

// TestConfiguredChainID: with Config.ChainID set, the first upstream to
// report is held to it too, instead of setting the reference.
func TestConfiguredChainID(t *testing.T) {
	s, err := New(Config{Upstreams: 2, HeadTimeout: time.Minute, ChainID: "0x0539"})
	if err != nil {
		t.Fatal(err)
	}
	s.Connected(0, t0)
	s.Connected(1, t0)
	if s.ChainID(0, `"0x1"`, t0) {
		t.Error("upstream 0 on chain 0x1 accepted, configured 0x539")
	}
	if !s.ChainID(1, `"0x539"`, t0) {
		t.Error("upstream 1 on chain 0x539 refused")
	}
	if sw, ok := s.Decide(t0); !ok || sw.To != 1 {
		t.Errorf("Decide = %v %v, want upstream 1 active", sw, ok)
	}
}

// TestStartWait: at start a less preferred upstream waits (up to
// StartWait) for every more preferred one to be tried: judged by its
// chain id, gone, or unreachable.
func TestStartWait(t *testing.T) {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	newSel := func() *Selector {
		s, err := New(Config{Upstreams: 3, HeadTimeout: time.Minute, StartWait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	type ev func(s *Selector)
	connect := func(i int) ev {
		return func(s *Selector) { s.Connected(i, at(0)); s.ChainID(i, "0x1", at(0)) }
	}
	tests := []struct {
		name   string
		events []ev
		decide int // ms
		want   int // active after Decide; -1 none
	}{
		{"preferred not tried yet: wait", []ev{connect(1)}, 100, -1},
		{"preferred connected, chain id not known yet: wait", []ev{connect(1), func(s *Selector) { s.Connected(0, at(0)) }}, 100, -1},
		{"preferred judged: it wins", []ev{connect(1), connect(0)}, 100, 0},
		{"preferred unreachable: next one", []ev{connect(1), func(s *Selector) { s.Unreachable(0, at(0)) }}, 100, 1},
		{"preferred on another chain: next one", []ev{connect(1), func(s *Selector) { s.Connected(0, at(0)); s.ChainID(0, "0x2", at(0)) }}, 100, 1},
		{"preferred connected and gone: next one", []ev{connect(1), func(s *Selector) { s.Connected(0, at(0)); s.Lost(0, at(0)) }}, 100, 1},
		{"a less preferred one waits for both above it", []ev{connect(2), func(s *Selector) { s.Unreachable(0, at(0)) }}, 100, -1},
		{"the wait ends", []ev{connect(1)}, 2000, 1},
		{"the most preferred never waits", []ev{connect(0)}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSel()
			for _, e := range tt.events {
				e(s)
			}
			s.Decide(at(tt.decide))
			if s.Active() != tt.want {
				t.Errorf("active %d, want %d", s.Active(), tt.want)
			}
		})
	}
	// After the first upstream was active, nothing waits any more.
	s := newSel()
	connect(0)(s)
	s.Decide(at(0))
	s.Lost(0, at(10))
	s.Connected(1, at(10))
	s.ChainID(1, "0x1", at(10))
	if sw, ok := s.Decide(at(20)); !ok || sw.To != 1 {
		t.Errorf("after a loss: Decide = %v %v, want upstream 1 at once", sw, ok)
	}
	s.Unreachable(-1, at(20)) // ignored
}

// TestLagGrace: an upstream counts as lagging only once it has stayed more
// than MaxHeadLag behind for LagGrace; catching up within it resets it.
func TestLagGrace(t *testing.T) {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s, err := New(Config{Upstreams: 2, MaxHeadLag: 2, HeadTimeout: time.Minute, LagGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		s.Connected(i, at(0))
		s.ChainID(i, "0x1", at(0))
		s.Head(i, 10, at(0))
	}
	if sw, ok := s.Decide(at(0)); !ok || sw.To != 0 {
		t.Fatalf("start: %v %v", sw, ok)
	}
	s.Head(1, 13, at(100)) // 0 is 3 behind
	if sw, ok := s.Decide(at(900)); ok {
		t.Fatalf("switched within the grace: %v", sw)
	}
	if w := s.Status(0, at(900)).Why; w != "" {
		t.Fatalf("within the grace: why %q", w)
	}
	s.Head(0, 13, at(1000)) // caught up: the grace starts over
	s.Head(1, 16, at(1050))
	if sw, ok := s.Decide(at(1500)); ok {
		t.Fatalf("switched although the lag started again 0.45 s ago: %v", sw)
	}
	if sw, ok := s.Decide(at(2050)); !ok || sw.To != 1 || sw.Reason != ReasonLagging {
		t.Fatalf("after the grace: Decide = %v %v, want to 1, lagging", sw, ok)
	}
}

// TestStatusLag: Status tells how far an upstream is behind the best head,
// in blocks and since when: the first head above its own was seen.
func TestStatusLag(t *testing.T) {
	two := Config{Upstreams: 2, MaxHeadLag: 2, HeadTimeout: time.Minute}
	tests := []struct {
		name   string
		script []step // events only: Decide's result is not checked here
		at     int
		i      int
		// want: head, best, behind since (seconds from t0; -1: not
		// behind), head age (seconds; -1: no head)
		head, best     uint64
		behind, headAt int
	}{
		{"level", []step{{0, up(0, 1), "", ""}, {1, "head 0 10; head 1 10", "", ""}}, 5, 1, 10, 10, -1, 1},
		{"two behind since the first head above", []step{
			{0, up(0, 1), "", ""}, {1, "head 0 10; head 1 10", "", ""}, {2, "head 0 11", "", ""}, {3, "head 0 12", "", ""},
		}, 5, 1, 10, 12, 2, 1},
		{"caught up one: behind since the next", []step{
			{0, up(0, 1), "", ""}, {1, "head 0 10; head 1 10", "", ""}, {2, "head 0 11", "", ""}, {3, "head 0 12", "", ""}, {6, "head 1 11", "", ""},
		}, 7, 1, 11, 12, 3, 6},
		{"a jump counts from when it was seen", []step{
			{0, up(0, 1), "", ""}, {1, "head 0 10; head 1 10", "", ""}, {4, "head 0 15", "", ""},
		}, 9, 1, 10, 15, 4, 1},
		{"no head yet", []step{{0, up(0, 1), "", ""}, {1, "head 0 10", "", ""}}, 3, 1, 0, 10, -1, -1},
		{"another chain's heads are not best", []step{
			{0, up(0) + "; conn 1; chain 1 0x2 rejected", "", ""}, {1, "head 0 10; head 1 50", "", ""},
		}, 3, 0, 10, 10, -1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(two)
			if err != nil {
				t.Fatal(err)
			}
			for n, st := range tt.script {
				for ev := range strings.SplitSeq(st.do, ";") {
					apply(t, s, strings.Fields(ev), at(st.at), n)
				}
				s.Decide(at(st.at))
			}
			st := s.Status(tt.i, at(tt.at))
			if st.Head != tt.head || st.Best != tt.best {
				t.Errorf("head %d best %d, want %d %d", st.Head, st.Best, tt.head, tt.best)
			}
			if want := at(tt.behind); tt.behind < 0 && !st.BehindSince.IsZero() || tt.behind >= 0 && !st.BehindSince.Equal(want) {
				t.Errorf("BehindSince %v, want t0+%ds (-1: zero)", st.BehindSince.Sub(t0), tt.behind)
			}
			if want := at(tt.headAt); tt.headAt < 0 && !st.HeadAt.IsZero() || tt.headAt >= 0 && !st.HeadAt.Equal(want) {
				t.Errorf("HeadAt %v, want t0+%ds (-1: zero)", st.HeadAt.Sub(t0), tt.headAt)
			}
		})
	}
}
