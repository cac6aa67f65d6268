package nri

import (
	"context"

	"github.com/sirupsen/logrus"
)

// nriLogger sends the NRI stub's own messages to the plugin's logrus logger, so one log shows
// connects, disconnects and mounts in order and in one format.
type nriLogger struct{ l *logrus.Logger }

func (n nriLogger) Debugf(_ context.Context, f string, a ...any) { n.l.Debugf(f, a...) }
func (n nriLogger) Infof(_ context.Context, f string, a ...any)  { n.l.Infof(f, a...) }
func (n nriLogger) Warnf(_ context.Context, f string, a ...any)  { n.l.Warnf(f, a...) }
func (n nriLogger) Errorf(_ context.Context, f string, a ...any) { n.l.Errorf(f, a...) }
