// Built in GOPATH mode (GO111MODULE=off) against Debian's Go sources in /usr/share/gocode:
// no module proxy is reachable. This file is what lets GOPATH mode resolve sprig's
// ".../v3" import path (Go's "minimal module compatibility"); see tests/helm/check-chart.
module kboxhelmrender

go 1.19
