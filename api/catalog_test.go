package api_test

import (
	"fmt"
	"strings"
	"testing"
)

func TestProductsAndHostedCheckouts(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		h.do("PATCH", "/api/merchant", m.Session, map[string]any{"wallets": map[string]any{"evm": evmA}})

		// Products.
		expectField(t, h.do("POST", "/api/v1/products", m.TestKey, map[string]any{"name": "Mug", "price": "12.345"}), "price")
		expectField(t, h.do("POST", "/api/v1/products", m.TestKey, map[string]any{"price": "12.00"}), "name")
		expectField(t, h.do("POST", "/api/v1/products", m.TestKey, map[string]any{"name": "Mug", "price": "12.00",
			"imageUrl": "https://elsewhere.example/x.png"}), "imageUrl")
		// An image the merchant uploaded is a product's image; another
		// merchant's, or anything else under /uploads/, is not.
		shop := h.signup()
		img := h.upload(shop.Session, "mug.png", pngPixel)
		expect(t, img, 201, "")
		withImage := h.do("POST", "/api/v1/products", shop.TestKey, map[string]any{"name": "Poster", "price": "5.00", "imageUrl": img.str("data", "url")})
		expect(t, withImage, 201, "")
		if withImage.str("data", "imageUrl") != img.str("data", "url") {
			t.Fatalf("image %s", withImage.Raw)
		}
		theirs := h.upload(m.Session, "x.png", pngPixel)
		for _, bad := range []string{theirs.str("data", "url"), "/uploads/" + shop.ID + "/x.png", img.str("data", "url") + "\u0000",
			"/uploads/merchants/" + shop.ID + "/../../etc/passwd"} {
			expectField(t, h.do("POST", "/api/v1/products", shop.TestKey, map[string]any{"name": "Poster", "price": "5.00", "imageUrl": bad}), "imageUrl")
		}

		r := h.do("POST", "/api/v1/products", m.TestKey, map[string]any{"name": "Mug", "description": "Stoneware", "price": "12.50"})
		expect(t, r, 201, "")
		prod := r.data()["id"].(string)
		if r.data()["active"] != true || r.data()["price"] != 12.5 {
			t.Fatalf("product %s", r.Raw)
		}
		expect(t, h.do("GET", "/api/v1/products/"+prod, m.TestKey, nil), 200, "")
		if list := h.do("GET", "/api/v1/products?active=true", m.TestKey, nil); len(list.list()) != 1 {
			t.Fatalf("products %s", list.Raw)
		}

		// A hosted checkout of the product, with metadata and return URLs.
		meta := map[string]string{"orderId": "A-1001", "channel": "web"}
		r = h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia", "metadata": meta,
			"externalCustomerId": "cus_42", "successUrl": "https://shop.example/thanks", "cancelUrl": "https://shop.example/cart",
			"expiresInMinutes": 60})
		expect(t, r, 201, "")
		hc := r.data()
		if hc["status"] != "open" || hc["name"] != "Mug" || hc["amount"] != 12.5 || hc["productId"] != prod || hc["externalCustomerId"] != "cus_42" ||
			!strings.HasSuffix(hc["url"].(string), "/pay/"+hc["paymentLinkId"].(string)) || hc["metadata"].(map[string]any)["orderId"] != "A-1001" {
			t.Fatalf("hosted checkout %s", r.Raw)
		}
		// Its single-use link is the checkout's, not listed with the links; it is payable.
		if links := h.do("GET", "/api/payment-links", m.TestKey, nil); len(links.list()) != 0 {
			t.Fatalf("a checkout's link is listed: %s", links.Raw)
		}
		expect(t, h.do("GET", "/api/checkout/links/"+hc["paymentLinkId"].(string), "", nil), 200, "")
		// Nor can the link routes read, change or delete it: changed, it
		// would charge what the checkout does not show; deleted, it would
		// take the page of a checkout that stays open.
		hcLink := "/api/payment-links/" + hc["paymentLinkId"].(string)
		expect(t, h.do("GET", hcLink, m.TestKey, nil), 404, "NOT_FOUND")
		expect(t, h.do("PATCH", hcLink, m.TestKey, map[string]any{"amount": "0.01"}), 404, "NOT_FOUND")
		expect(t, h.do("DELETE", hcLink, m.Session, nil), 404, "NOT_FOUND")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, map[string]any{"paymentLinkId": hc["paymentLinkId"], "network": "base_sepolia",
			"amount": "12.50", "txHash": "0x" + strings.Repeat("ab", 32), "walletAddress": "0x" + strings.Repeat("cd", 20)}), "paymentLinkId")
		if q := h.do("GET", "/api/checkout/links/"+hc["paymentLinkId"].(string), "", nil); q.data()["amount"] != 12.5 {
			t.Fatalf("the checkout's link changed: %s", q.Raw)
		}

		// An amount instead of a product; the limits.
		expect(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"name": "Custom", "amount": "3.00", "network": "base_sepolia"}), 201, "")
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "amount": "3.00", "network": "base_sepolia"}), "productId")
		// A blank productId (an empty template variable) is no product:
		// name and amount are required, not a checkout at 0.00.
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": " ", "network": "base_sepolia"}), "amount")
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": " ", "network": "base_sepolia"}), "name")
		big := map[string]string{}
		for i := range 51 {
			big[fmt.Sprint("k", i)] = "v"
		}
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia", "metadata": big}), "metadata")
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia",
			"metadata": map[string]string{strings.Repeat("k", 41): "v"}}), "metadata")
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia",
			"metadata": map[string]string{"k": strings.Repeat("v", 501)}}), "metadata.k")
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia", "expiresInMinutes": 2}), "expiresInMinutes")
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia", "successUrl": "javascript:alert(1)"}), "successUrl")
		for _, bad := range []string{"https://", "https://a\u0001b.example", "https://\u0000evil.example", "https://user:pw@shop.example/", "https://shop.example/\"x"} {
			expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia", "cancelUrl": bad}), "cancelUrl")
		}
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base"}), "network")
		// Live mode sends a paying customer back over https only; test mode
		// takes a local shop's http. The ids' placeholders are kept as given.
		live := h.withLive(h.signup())
		liveReq := func(u string) map[string]any {
			return map[string]any{"name": "Order", "amount": "3.00", "network": "base", "successUrl": u}
		}
		expectField(t, h.do("POST", "/api/v1/checkouts", live.LiveKey, liveReq("http://shop.example/thanks")), "successUrl")
		r = h.do("POST", "/api/v1/checkouts", live.LiveKey, liveReq("https://shop.example/thanks?c={CHECKOUT_ID}&s={SESSION_ID}"))
		expect(t, r, 201, "")
		if r.data()["successUrl"] != "https://shop.example/thanks?c={CHECKOUT_ID}&s={SESSION_ID}" || r.data()["livemode"] != true {
			t.Fatalf("live checkout %s", r.Raw)
		}
		expect(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia",
			"successUrl": "http://localhost:3000/thanks/{CHECKOUT_ID}"}), 201, "")

		// A deactivated product sells no more.
		expect(t, h.do("PATCH", "/api/v1/products/"+prod, m.TestKey, map[string]any{"active": false}), 200, "")
		expectField(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": prod, "network": "base_sepolia"}), "productId")

		// Cancel: the checkout and its link close.
		id := hc["id"].(string)
		c := h.do("POST", "/api/v1/checkouts/"+id+"/cancel", m.TestKey, nil)
		if c.Status != 200 || c.data()["status"] != "cancelled" {
			t.Fatalf("cancel %s", c.Raw)
		}
		expect(t, h.do("POST", "/api/v1/checkouts/"+id+"/cancel", m.TestKey, nil), 409, "CONFLICT")
		expectField(t, h.do("GET", "/api/checkout/links/"+hc["paymentLinkId"].(string), "", nil), "linkId")
		if got := h.do("GET", "/api/v1/checkouts", m.TestKey, nil); len(got.list()) != 3 {
			t.Fatalf("checkouts %s", got.Raw)
		}
		// A null amount beside a product is no amount (clients send unset
		// fields so).
		cup := h.do("POST", "/api/v1/products", m.TestKey, map[string]any{"name": "Cup", "price": "4.00"})
		expect(t, cup, 201, "")
		expect(t, h.do("POST", "/api/v1/checkouts", m.TestKey, map[string]any{"productId": cup.str("data", "id"), "amount": nil,
			"network": "base_sepolia"}), 201, "")
	})
}
