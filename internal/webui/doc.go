// Package webui is Turnpike's demo chat page and its browser client
// (static/turnpike.js), embedded in the binary: dependency-free ES modules
// and CSS, no build step, no CDN.
//
// Ingest serves the Page at GET / and GET /ui/… (ingest.Deps.Page). The page
// talks to ingest's API on its own origin and to the push gateway's
// WebSocket at Config.StreamURL; in the devstack it signs in through POST
// /v1/dev/token (also turnpike.js's token provider there, which replaces a
// token the restarted devstack refuses), elsewhere it asks for a token to
// paste. It keeps drafts and unsent messages in sessionStorage until the API
// accepted them, so nothing typed is lost across reconnects and restarts.
//
// A Page is immutable once built and safe for concurrent use.
package webui
