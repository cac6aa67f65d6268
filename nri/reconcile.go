package nri

// Close stops what the plugin runs beside its requests: the live copies' Follower (the copies
// stay mounted and recorded for the agent's successor).
func (p *Plugin) Close() {
	if f := p.liveFollower(); f != nil {
		f.Close()
	}
}
