"""One leader at a time; its writes are fenced by its generation."""
import coord

with coord.Client(client="leader-example") as c:
    c.leader.define("reindex", protocol="reindex@1", steal="incident-only")
    with c.leader("reindex", lease=10.0, protocol="reindex@1") as lead:
        print("state:", lead.state.value, "mode:", lead.mode,
              "generation > 0:", lead.generation > 0)
        print("applied:", lead.commit("batch-1", "cursor", b"1000").applied)
        print("again:", lead.commit("batch-1", "cursor", b"1000").duplicate)   # at most once
        print("read:", lead.read("cursor"))
        print("info:", c.leader.info("reindex").state)
    print("after the block:", lead.state.value)
    try:
        c.leader("reindex", protocol="reindex@0.9").campaign()
    except coord.InvalidOptions:
        print("bad protocol refused")
    try:
        with c.leader("reindex"):
            print("never printed")
    except coord.ProtocolPinned:
        print("pinned: a campaign without protocol refused")
    print("history:", [t.reason for t in c.leader.history("reindex")])
    c.leader.disable("reindex")          # the kill switch
    try:
        with c.leader("reindex", timeout=1.0, protocol="reindex@1"):
            print("never printed")
    except coord.Disabled:
        print("disabled: campaign refused")
    with c.leader("reindex", protocol="reindex@1", incident="INC-1") as lead:
        print("incident responder leads while disabled:", c.leader.info("reindex").disabled)
    c.leader.enable("reindex")
