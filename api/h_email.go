package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/notify"
)

// Confirming the account's e-mail address. Anyone may sign up with any
// address, so the address proves nothing until the account's holder opens
// a link sent there while signed in: the link alone (a mailbox's owner who
// never signed up, clicking) confirms nothing, and the session alone (a
// stranger who typed the address) neither. Until then the account cannot
// submit its KYB application (an operator would read the address as the
// business's), and a password reset, which proves the mailbox only, takes
// back what the account was given (models.Store.ResetPassword).

const (
	// confirmTTL is how long a confirmation link works.
	confirmTTL = 48 * time.Hour
	// confirmsPerHour is how many confirmation e-mails an account is sent
	// in an hour at most.
	confirmsPerHour = 5
)

// confirmationsOn reports whether this server can confirm addresses: it
// sends e-mail, and knows the public address its links lead to.
func (s *Server) confirmationsOn() bool { return s.Mailer != nil && s.ResetBaseURL != "" }

// errConfirmToken is the answer to a confirmation link that is not the
// signed-in account's valid latest one.
var errConfirmToken = apperr.Invalid("token",
	"is not a valid confirmation link of this account, or it was used, replaced by a newer one or expired (ask for a new link)")

// sendConfirmation stores a confirmation link for m's address and e-mails
// it after the answer; false: the account's hourly number was reached.
func (s *Server) sendConfirmation(c *gin.Context, m *models.Merchant) (bool, error) {
	token, err := auth.GenerateConfirmToken()
	if err != nil {
		return false, err
	}
	created, err := s.Store.CreateEmailConfirmation(c.Request.Context(), m.ID, m.Email, s.Hasher.Hash(token), confirmTTL, confirmsPerHour)
	if err != nil || !created {
		return false, err
	}
	link := strings.TrimRight(s.ResetBaseURL, "/") + "/dashboard/confirm-email?token=" + token
	s.mailLater(c, m.ID, notify.Message{To: m.Email, Subject: "Confirm your paygate e-mail address", Body: confirmMailBody(link)},
		"e-mail confirmation")
	return true, nil
}

// confirmMailBody is the confirmation e-mail. Like the reset e-mail it
// names no business (a stranger may have typed it), and it tells a reader
// who did not sign up what to do.
func confirmMailBody(link string) string {
	return fmt.Sprintf(`Hello,

a paygate account was created with this e-mail address. If it was you, open this link within 48 hours,
signed in to the account, to confirm the address:

%s

Until it is confirmed the account cannot apply for live payments (KYB).

If you did not sign up, someone typed your address: do not sign in with anything they gave you. To take
the account over, choose a password from "Forgot your password" on the sign-in page; that confirms the
address and removes the API keys, webhook endpoints and wallets they set up.
`, link)
}

// requestEmailConfirmation serves POST /api/auth/email-confirmation
// (session): a new link is e-mailed to the account's address.
func (s *Server) requestEmailConfirmation(c *gin.Context) {
	if !s.confirmationsOn() {
		fail(c, apperr.Unavailable("this server sends no e-mail, so it confirms no address; ask its operator", apperr.NoRetry))
		return
	}
	m, err := s.Store.Merchant(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	if m.EmailConfirmedAt != nil {
		fail(c, apperr.Conflict("the account's e-mail address is confirmed already"))
		return
	}
	sent, err := s.sendConfirmation(c, m)
	if err != nil {
		fail(c, err)
		return
	}
	if !sent {
		at, err := s.Store.EmailConfirmationAllowedAt(c.Request.Context(), m.ID, confirmsPerHour)
		if err != nil {
			fail(c, err)
			return
		}
		fail(c, apperr.TooMany(fmt.Sprintf("%d confirmation links were sent in the past hour, the most an hour; open the latest one, or ask again later",
			confirmsPerHour), at.Sub(s.Store.Now())))
		return
	}
	respondMessage(c, http.StatusAccepted, "a link to confirm "+m.Email+" is on its way; open it signed in, within 48 hours")
}

type confirmEmailRequest struct {
	Token string `json:"token"`
}

// confirmEmail serves POST /api/auth/email-confirmation/confirm (session):
// the link's token, opened by the account it was sent for, confirms the
// address once.
func (s *Server) confirmEmail(c *gin.Context) {
	var req confirmEmailRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	token := strings.TrimSpace(req.Token)
	if token == "" {
		fail(c, apperr.Invalid("token", "is required"))
		return
	}
	if !strings.HasPrefix(token, auth.ConfirmPrefix) || len(token) > 128 {
		fail(c, errConfirmToken)
		return
	}
	p := principal(c)
	conf, err := lookupRotating(c, s, token, s.Store.EmailConfirmationByHash, func(e *models.EmailConfirmation) string { return e.ID },
		s.Store.RehashEmailConfirmation)
	if err == nil && conf.MerchantID != p.MerchantID {
		// Another account's link: not this one's to use (and not used).
		err = apperr.NotFound()
	}
	var m *models.Merchant
	if err == nil {
		m, err = s.Store.ConfirmEmail(c.Request.Context(), p.MerchantID, conf.ID)
	}
	if errors.Is(err, apperr.ErrNotFound) {
		if cur, cerr := s.Store.Merchant(c.Request.Context(), p.MerchantID); cerr == nil && cur.EmailConfirmedAt != nil {
			fail(c, apperr.Conflict("the account's e-mail address is confirmed already"))
			return
		}
		err = errConfirmToken
	}
	if err != nil {
		fail(c, err)
		return
	}
	s.Logger.Info("e-mail address confirmed", "merchantId", m.ID, "requestId", requestID(c))
	respond(c, http.StatusOK, toMerchantJSON(m))
}
