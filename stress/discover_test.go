package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClusterNodesListsEveryNodeWithAnAddress(t *testing.T) {
	reply := "" +
		"07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n" +
		"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922\n" +
		"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 connected 10923-16383\n" +
		"6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 myself,master - 0 1426238316232 5 connected\n" +
		"824fe116063bc5fcf9f4ffd895bc17aee7731ac3 :0@0 master,noaddr - 1426238316232 1426238316232 6 disconnected\n" +
		"e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30006@31006 handshake - 0 0 0 connected\n"
	assert.Equal(t, map[string]bool{
		"127.0.0.1:30004": false,
		"127.0.0.1:30002": true,
		"127.0.0.1:30003": true,
		"127.0.0.1:30005": true,
	}, clusterNodes(reply))
}
