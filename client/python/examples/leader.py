"""One leader at a time; its writes are fenced by its generation."""
import coord

with coord.Client(client="leader-example") as c:
    with c.leader("reindex", lease=10.0) as lead:
        print("state:", lead.state.value, "generation > 0:", lead.generation > 0)
        print("applied:", lead.commit("batch-1", "cursor", b"1000"))
        print("again:", lead.commit("batch-1", "cursor", b"1000"))    # at most once
        print("read:", lead.read("cursor"))
        print("info:", c.leader.info("reindex").state)
    print("after the block:", lead.state.value)
    c.leader.disable("reindex")          # the kill switch
    try:
        with c.leader("reindex", timeout=1.0):
            print("never printed")
    except coord.Disabled:
        print("disabled: campaign refused")
    c.leader.enable("reindex")
