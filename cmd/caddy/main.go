// Command caddy is Caddy with its standard modules and the rate_limit
// handler: the program xcaddy generates for
// `xcaddy build --with github.com/zonelimit/caddy-ratelimit`.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/zonelimit/caddy-ratelimit"

	// As xcaddy's main: the time zone database built in, for hosts
	// without one (the CLI prints local times).
	_ "time/tzdata"
)

func main() {
	caddycmd.Main()
}
