// Package webtest checks the page of gpumem serve in a real headless
// Chromium: it builds the gpumem binary, starts gpumem serve, drives the
// page with chromedp (set a job, move a slider with the keyboard, plan,
// paste an out-of-memory message and a memory log), and compares what
// the page shows with the library and with the command line the page
// says reproduces it. It fails on any console error, uncaught exception
// or request to another host.
//
// It is a module of its own so that the core module does not depend on
// chromedp, and a plain go test ./... at the root does not need a
// browser. .ci/run runs it when chromium is installed:
//
//	cd cmd/gpumem/webtest && go test -count=1 .
//
// With -shots DIR it writes the desktop and phone screenshots the README
// shows (cmd/gpumem/doc/web-desktop.png, web-phone.png):
//
//	go test -count=1 . -shots ../doc
package webtest
