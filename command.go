package ratelimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(rateLimitCommand())
}

// rateLimitCommand is `caddy rate-limit`: the admin API (admin.go) from
// the command line, for a support person.
func rateLimitCommand() caddycmd.Command {
	return caddycmd.Command{
		Name:  "rate-limit",
		Usage: "zones|get|reset|block|unblock [--zone <name>] [--key <key>] [--for <duration>] [--address <interface>] [--config <path> [--adapter <name>]]",
		Short: "Inspects, resets, blocks or unblocks a rate limit key of the running Caddy",
		Long: `
Talks to the rate limit admin API of the running Caddy instance:

  caddy rate-limit zones                          the zones and their limits
  caddy rate-limit get   --zone Z --key K         a key's use per limit
  caddy rate-limit reset --zone Z --key K         forget what the key has used
  caddy rate-limit block --zone Z --key K --for 1h   refuse the key for a while
  caddy rate-limit unblock --zone Z --key K       lift the block

The key is the zone's key as the logs show it (e.g. the client address, or
its network with ipv4_prefix/ipv6_prefix: an address is grouped as the zone
groups it). With store memory this acts on the instance the admin endpoint
belongs to; with store redis on every instance sharing the Redis.

The admin endpoint's address is the --address flag if given, else the
admin address of the config file given with --config, else the default.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.PersistentFlags().String("address", "", "Address of the administration listener, if different from config")
			cmd.PersistentFlags().StringP("config", "c", "", "Configuration file to read the admin address from")
			cmd.PersistentFlags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.Args = cobra.NoArgs
			// Without a RunE cobra answers a missing or unknown
			// subcommand with the help and success.
			cmd.RunE = func(*cobra.Command, []string) error {
				return errors.New("missing subcommand: want zones, get, reset, block or unblock (see caddy rate-limit --help)")
			}
			for _, sub := range rateLimitSubcommands() {
				c := &cobra.Command{Use: sub.name, Short: sub.short, Args: cobra.NoArgs}
				if sub.key {
					c.Flags().StringP("zone", "z", "", "Zone name (required)")
					c.Flags().StringP("key", "k", "", "Key, as the logs show it (required)")
				}
				if sub.name == "block" {
					c.Flags().String("for", "", "How long to block the key, e.g. 30m, 1h or 2d (required)")
				}
				run := sub.run
				c.RunE = func(c *cobra.Command, _ []string) error {
					return runRateLimit(c, run)
				}
				cmd.AddCommand(c)
			}
		},
	}
}

// rateLimitSub is a subcommand of `caddy rate-limit`.
type rateLimitSub struct {
	name, short string
	key         bool // takes --zone and --key
	run         func(api *adminClient, fl caddycmd.Flags, w io.Writer) error
}

func rateLimitSubcommands() []rateLimitSub {
	return []rateLimitSub{
		{name: "zones", short: "Lists the zones of the running config", run: cmdZones},
		{name: "get", short: "Shows a key's use per limit", key: true, run: cmdGet},
		{name: "reset", short: "Forgets what a key has used", key: true, run: cmdReset},
		{name: "block", short: "Refuses a key for a while", key: true, run: cmdBlock},
		{name: "unblock", short: "Lifts a key's block", key: true, run: cmdUnblock},
	}
}

// runRateLimit finds the admin address and runs a subcommand.
func runRateLimit(c *cobra.Command, run func(*adminClient, caddycmd.Flags, io.Writer) error) error {
	fl := caddycmd.Flags{FlagSet: c.Flags()}
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return fmt.Errorf("couldn't determine admin API address: %v", err)
	}
	c.SilenceUsage = true // an error from here on is the API's, not a usage error
	return run(&adminClient{addr: addr}, fl, c.OutOrStdout())
}

// adminClient calls the rate limit admin API at addr.
type adminClient struct{ addr string }

// do sends the request and decodes the JSON answer into out (when not
// nil). An error answer is returned as the API's message.
func (a *adminClient) do(method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	resp, err := caddycmd.AdminAPIRequest(a.addr, method, path, nil, rd)
	if err != nil {
		return apiMessage(err)
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		// Another server at that address (a site's port, say): say so,
		// rather than a JSON syntax error.
		return fmt.Errorf("%s did not answer %s %s as Caddy's admin API with this plugin (HTTP %d, %s): %w; is --address the admin endpoint?",
			a.addr, method, path, resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	return nil
}

// apiMessage shortens AdminAPIRequest's error "caddy responded with error:
// HTTP 404: {"error":"..."}" to the API's message and status.
func apiMessage(err error) error {
	msg := err.Error()
	status := ""
	if i := strings.Index(msg, "HTTP "); i >= 0 {
		status, _, _ = strings.Cut(msg[i:], ":")
	}
	var body struct {
		Error string `json:"error"`
	}
	if i := strings.IndexByte(msg, '{'); i >= 0 && json.Unmarshal([]byte(msg[i:]), &body) == nil && body.Error != "" {
		return fmt.Errorf("%s (%s)", body.Error, status)
	}
	return err
}

// keyCall sends method to the API path of the key given with --zone and
// --key, plus suffix, and returns the answer.
func keyCall(api *adminClient, fl caddycmd.Flags, method, suffix string, body any) (adminKey, error) {
	var k adminKey
	zone, key := fl.String("zone"), fl.String("key")
	if zone == "" || key == "" {
		return k, errors.New("--zone and --key are required")
	}
	path := "/rate_limit/zones/" + url.PathEscape(zone) + "/keys/" + url.PathEscape(key) + suffix
	err := api.do(method, path, body, &k)
	return k, err
}

func cmdZones(api *adminClient, _ caddycmd.Flags, w io.Writer) error {
	var zs adminZones
	if err := api.do(http.MethodGet, "/rate_limit/zones", nil, &zs); err != nil {
		return err
	}
	if len(zs.Zones) == 0 {
		fmt.Fprintln(w, "no rate limit zones in the running config")
		return nil
	}
	for _, z := range zs.Zones {
		var limits []string
		for _, t := range z.Tiers {
			limits = append(limits, fmt.Sprintf("%d per %s", t.Events, windowText(t.Window)))
		}
		line := fmt.Sprintf("%s: %s, %s, %s", z.Name, strings.Join(limits, " and "), z.Algorithm, z.Store)
		if z.Keys != nil {
			line += fmt.Sprintf(", keys held: %d", *z.Keys)
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

func cmdGet(api *adminClient, fl caddycmd.Flags, w io.Writer) error {
	k, err := keyCall(api, fl, http.MethodGet, "", nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "zone %s, key %s\n", k.Zone, k.Key)
	for _, t := range k.Tiers {
		line := fmt.Sprintf("  %d of %d used per %s, %d remaining", t.Used, t.Limit, windowText(t.Window), t.Remaining)
		if t.Used > 0 {
			line += ", whole again in " + shortDuration(t.ResetAfter)
		}
		fmt.Fprintln(w, line)
	}
	if k.BlockedUntil != nil {
		fmt.Fprintf(w, "  blocked until %s\n", k.BlockedUntil.Local().Format(time.DateTime))
	} else {
		fmt.Fprintln(w, "  not blocked")
	}
	return nil
}

func cmdBlock(api *adminClient, fl caddycmd.Flags, w io.Writer) error {
	d, err := caddy.ParseDuration(fl.String("for"))
	if err != nil || d <= 0 {
		return fmt.Errorf("--for: want a positive duration such as 30m, 1h or 2d, got %q", fl.String("for"))
	}
	k, err := keyCall(api, fl, http.MethodPost, "/block", map[string]string{"duration": d.String()})
	if err != nil {
		return err
	}
	until := "?"
	if k.BlockedUntil != nil {
		until = k.BlockedUntil.Local().Format(time.DateTime)
	}
	fmt.Fprintf(w, "blocked key %s in zone %s until %s\n", k.Key, k.Zone, until)
	return nil
}

// cmdReset forgets what a key has used, and says when a block stays: a
// reset does not lift it (unblock does), so the key's next request is
// refused all the same.
func cmdReset(api *adminClient, fl caddycmd.Flags, w io.Writer) error {
	k, err := keyCall(api, fl, http.MethodDelete, "", nil)
	if err != nil {
		return err
	}
	s, err := keyCall(api, fl, http.MethodGet, "", nil)
	if err == nil && s.BlockedUntil != nil && s.BlockedUntil.After(time.Now()) {
		fmt.Fprintf(w, "reset key %s in zone %s, but it stays blocked until %s: its next request is refused; `caddy rate-limit unblock` lifts the block\n",
			k.Key, k.Zone, s.BlockedUntil.Local().Format(time.DateTime))
		return nil
	}
	fmt.Fprintf(w, "reset key %s in zone %s: its next request finds it whole\n", k.Key, k.Zone)
	return nil
}

// cmdUnblock lifts a key's block, and says when the key is still at a
// limit: its next request is then refused all the same, and in a block_for
// zone that denial blocks it again, which an operator who meant to let the
// client through would not expect.
func cmdUnblock(api *adminClient, fl caddycmd.Flags, w io.Writer) error {
	k, err := keyCall(api, fl, http.MethodDelete, "/block", nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "unblocked key %s in zone %s\n", k.Key, k.Zone)
	s, err := keyCall(api, fl, http.MethodGet, "", nil)
	if err != nil {
		return nil // the unblock is done; the hint is only a hint
	}
	for _, t := range s.Tiers {
		if t.Remaining <= 0 {
			fmt.Fprintf(w, "its %d per %s are used up: its next request is refused (and, with block_for, blocks it again); `caddy rate-limit reset` lets it through now\n",
				t.Limit, windowText(t.Window))
			break
		}
	}
	return nil
}

// windowText is a window as policy names write it (windowName: "1d",
// "90s", "1500ms"), from the API's duration string.
func windowText(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return s
	}
	return windowName(d)
}

// shortDuration drops the zero units of a Duration's string: "1m" rather
// than "1m0s". A string that is not a Duration is kept.
func shortDuration(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil {
		return s
	}
	if d >= time.Second {
		d = d.Round(time.Second)
	}
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return windowName(d) // "1d", as the window it is printed beside
	}
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}
