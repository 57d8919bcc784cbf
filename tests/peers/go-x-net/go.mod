module quicack.test/peers/go-x-net

go 1.26.0

require golang.org/x/net v0.62.0

require (
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
