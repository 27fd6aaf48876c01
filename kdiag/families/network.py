"""Network families: interfaces' counters and speeds, and the kernel's netstat counters."""

from __future__ import annotations

from kdiag.families.family import counter, gauge, keyed

# netdev
NETWORK_RECEIVE_BYTES_TOTAL = counter("kdiag_network_receive_bytes_total", "Bytes received.", "device")
NETWORK_RECEIVE_DROP_TOTAL = counter("kdiag_network_receive_drop_total", "Received packets dropped.", "device")
NETWORK_RECEIVE_ERRS_TOTAL = counter("kdiag_network_receive_errs_total", "Receive errors.", "device")
NETWORK_RECEIVE_PACKETS_TOTAL = counter("kdiag_network_receive_packets_total", "Packets received.", "device")
NETWORK_TRANSMIT_BYTES_TOTAL = counter("kdiag_network_transmit_bytes_total", "Bytes transmitted.", "device")
NETWORK_TRANSMIT_DROP_TOTAL = counter("kdiag_network_transmit_drop_total", "Packets dropped on transmit.", "device")
NETWORK_TRANSMIT_ERRS_TOTAL = counter("kdiag_network_transmit_errs_total", "Transmit errors.", "device")
NETWORK_TRANSMIT_PACKETS_TOTAL = counter("kdiag_network_transmit_packets_total", "Packets transmitted.", "device")

# netstat
NETSTAT_TCPEXT_LISTENDROPS_TOTAL = counter(
    "kdiag_netstat_TcpExt_ListenDrops_total", "SYNs and connections dropped at listening sockets."
)
NETSTAT_TCPEXT_LISTENOVERFLOWS_TOTAL = counter(
    "kdiag_netstat_TcpExt_ListenOverflows_total", "Connections dropped because a listen queue was full."
)
NETSTAT_TCPEXT_TCPLOSTRETRANSMIT_TOTAL = counter("kdiag_netstat_TcpExt_TCPLostRetransmit_total", "TCP retransmissions lost again.")
NETSTAT_TCPEXT_TCPSYNRETRANS_TOTAL = counter("kdiag_netstat_TcpExt_TCPSynRetrans_total", "TCP SYN and SYN-ACK retransmissions.")
NETSTAT_TCPEXT_TCPTIMEOUTS_TOTAL = counter("kdiag_netstat_TcpExt_TCPTimeouts_total", "TCP retransmission timeouts.")
NETSTAT_TCP_ACTIVEOPENS_TOTAL = counter("kdiag_netstat_Tcp_ActiveOpens_total", "TCP connections opened by connect().")
NETSTAT_TCP_CURRESTAB = gauge("kdiag_netstat_Tcp_CurrEstab", "TCP connections established or closing on the peer's side now.")
NETSTAT_TCP_INERRS_TOTAL = counter("kdiag_netstat_Tcp_InErrs_total", "TCP segments received in error.")
NETSTAT_TCP_INSEGS_TOTAL = counter("kdiag_netstat_Tcp_InSegs_total", "TCP segments received.")
NETSTAT_TCP_OUTSEGS_TOTAL = counter("kdiag_netstat_Tcp_OutSegs_total", "TCP segments sent, retransmissions excluded.")
NETSTAT_TCP_PASSIVEOPENS_TOTAL = counter("kdiag_netstat_Tcp_PassiveOpens_total", "TCP connections accepted.")
NETSTAT_TCP_RETRANSSEGS_TOTAL = counter("kdiag_netstat_Tcp_RetransSegs_total", "TCP segments retransmitted.")
NETSTAT_UDP_INDATAGRAMS_TOTAL = counter("kdiag_netstat_Udp_InDatagrams_total", "UDP datagrams delivered.")
NETSTAT_UDP_INERRORS_TOTAL = counter("kdiag_netstat_Udp_InErrors_total", "UDP datagrams received in error.")
NETSTAT_UDP_OUTDATAGRAMS_TOTAL = counter("kdiag_netstat_Udp_OutDatagrams_total", "UDP datagrams sent.")
NETSTAT_UDP_RCVBUFERRORS_TOTAL = counter("kdiag_netstat_Udp_RcvbufErrors_total", "UDP datagrams dropped for a full receive buffer.")
NETSTAT_UDP_SNDBUFERRORS_TOTAL = counter("kdiag_netstat_Udp_SndbufErrors_total", "UDP datagrams dropped for a full send buffer.")

# netclass
NETWORK_MTU_BYTES = gauge("kdiag_network_mtu_bytes", "MTU in bytes.", "device")
NETWORK_QUEUES = gauge("kdiag_network_queues", "Queues of the interface per direction (rx, tx).", "device", "direction")
NETWORK_SPEED_BYTES = gauge("kdiag_network_speed_bytes", "Link speed in bytes per second.", "device")
NETWORK_UP = gauge("kdiag_network_up", "Whether operstate is up.", "device")
NETWORK = keyed(
    "kdiag_network_", "_total", NETWORK_RECEIVE_BYTES_TOTAL, NETWORK_RECEIVE_PACKETS_TOTAL, NETWORK_RECEIVE_ERRS_TOTAL,
    NETWORK_RECEIVE_DROP_TOTAL, NETWORK_TRANSMIT_BYTES_TOTAL, NETWORK_TRANSMIT_PACKETS_TOTAL, NETWORK_TRANSMIT_ERRS_TOTAL,
    NETWORK_TRANSMIT_DROP_TOTAL,
)
NETSTAT = (
    NETSTAT_TCPEXT_LISTENDROPS_TOTAL,
    NETSTAT_TCPEXT_LISTENOVERFLOWS_TOTAL,
    NETSTAT_TCPEXT_TCPLOSTRETRANSMIT_TOTAL,
    NETSTAT_TCPEXT_TCPSYNRETRANS_TOTAL,
    NETSTAT_TCPEXT_TCPTIMEOUTS_TOTAL,
    NETSTAT_TCP_ACTIVEOPENS_TOTAL,
    NETSTAT_TCP_CURRESTAB,
    NETSTAT_TCP_INERRS_TOTAL,
    NETSTAT_TCP_INSEGS_TOTAL,
    NETSTAT_TCP_OUTSEGS_TOTAL,
    NETSTAT_TCP_PASSIVEOPENS_TOTAL,
    NETSTAT_TCP_RETRANSSEGS_TOTAL,
    NETSTAT_UDP_INDATAGRAMS_TOTAL,
    NETSTAT_UDP_INERRORS_TOTAL,
    NETSTAT_UDP_OUTDATAGRAMS_TOTAL,
    NETSTAT_UDP_RCVBUFERRORS_TOTAL,
    NETSTAT_UDP_SNDBUFERRORS_TOTAL,
)
